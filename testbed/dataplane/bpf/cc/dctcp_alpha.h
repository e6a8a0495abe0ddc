/* DCTCP's estimate of the fraction of marked packets, as the kernel computes it
 * (net/ipv4/tcp_dctcp.c dctcp_update_alpha): alpha <- (1 - g) * alpha + g * F once per
 * window, alpha scaled by 1024, g = 1 / 2^DCTCP_SHIFT_G, F = delivered_ce / delivered.
 * Plain C on __u32, so that the unit tests compile and run the very arithmetic the BPF
 * program does (tests/unit/test_hostcc.py). */
#ifndef DCTCP_ALPHA_H
#define DCTCP_ALPHA_H

#ifndef DCTCP_SHIFT_G
#define DCTCP_SHIFT_G 4           /* g = 1/16 */
#endif
#define DCTCP_MAX_ALPHA 1024U

static inline __u32 dctcp_alpha_next(__u32 alpha, __u32 delivered, __u32 delivered_ce)
{
	/* (1 - g) * alpha: below 2^g, g * alpha rounds to 0 and the kernel drops alpha to 0
	 * instead (min_not_zero), so that it can reach 0 */
	__u32 decay = alpha >> DCTCP_SHIFT_G;

	alpha -= decay ? decay : alpha;
	if (delivered_ce) {
		/* + g * F, in 1024ths: delivered_ce * 2^(10 - g) / delivered */
		__u32 f = (delivered_ce << (10 - DCTCP_SHIFT_G)) / (delivered ? delivered : 1);

		alpha = alpha + f < DCTCP_MAX_ALPHA ? alpha + f : DCTCP_MAX_ALPHA;
	}
	return alpha;
}

#endif

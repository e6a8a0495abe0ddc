/* Swift's target delay (Kumar et al., SIGCOMM'20, section 3.5), in packet times:
 *   target = base + hops * h + clamp(alpha / sqrt(cwnd) + beta, 0, fs_range)
 * with alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)) and
 * beta = -alpha / sqrt(fs_max_cwnd): the flow term is fs_range at fs_min_cwnd and 0 at
 * fs_max_cwnd. Everything is in thousandths of a packet time ("mpt") and cwnd in
 * thousandths of a packet, so that a target means the same number of packets queued at
 * 10 Mb/s as at 100 Gb/s. Plain C on __u32/__u64, so that the unit tests compile and run
 * the very arithmetic the BPF program does (tests/unit/test_hostcc.py). */
#ifndef SWIFT_TARGET_H
#define SWIFT_TARGET_H

/* At the reference, 100 Gb/s links and 4096-byte packets (0.328 us a packet), the defaults
 * of the public htsim model of Swift (the paper's own values were not at hand): base target
 * 20 us, h = 20 / 6.55 us a hop, fs_range 100 us, fs_min_cwnd 0.1, fs_max_cwnd 100
 * packets. In packet times: */
#ifndef SWIFT_BASE_MPT
#define SWIFT_BASE_MPT 61035       /* 20 us / 0.32768 us */
#endif
#ifndef SWIFT_HOP_MPT
#define SWIFT_HOP_MPT 9318         /* 3.053 us */
#endif
#ifndef SWIFT_FS_RANGE_MPT
#define SWIFT_FS_RANGE_MPT 305176  /* 100 us */
#endif
#define SWIFT_FS_MIN_CWND_MILLI 100       /* 0.1 packet */
#define SWIFT_FS_MAX_CWND_MILLI 100000    /* 100 packets */

/* floor(sqrt(x)) for x < 2^32, digit by digit without a branch: the verifier walks one
 * path through it, where a branch per digit would make it walk 2^16 */
static inline __u64 swift_isqrt(__u64 x)
{
	__u64 r = 0, bit = 1ULL << 30, t, ge;
	int i;

#pragma unroll
	for (i = 0; i < 16; i++) {
		t = r + bit;
		ge = ((t - x - 1) >> 63) & 1;   /* x >= t, both below 2^33 */
		x -= t & (0 - ge);
		r = (r >> 1) + (bit & (0 - ge));
		bit >>= 2;
	}
	return r;
}

/* 1/sqrt(cwnd) in 2^-16ths, cwnd in thousandths of a packet (at most 100 packets) */
static inline __u64 swift_inv_sqrt_q16(__u64 cwnd_milli)
{
	return (65536ULL * 1000) / (swift_isqrt(cwnd_milli * 1000) | 1);
}

/* The flow-scaling term in thousandths of a packet time */
static inline __u64 swift_flow_mpt(__u64 cwnd_milli)
{
	__u64 r, r_max, r_min;

	if (cwnd_milli >= SWIFT_FS_MAX_CWND_MILLI)
		return 0;
	if (cwnd_milli <= SWIFT_FS_MIN_CWND_MILLI)
		return SWIFT_FS_RANGE_MPT;
	r = swift_inv_sqrt_q16(cwnd_milli);
	r_max = swift_inv_sqrt_q16(SWIFT_FS_MAX_CWND_MILLI);
	r_min = swift_inv_sqrt_q16(SWIFT_FS_MIN_CWND_MILLI);
	return (__u64)SWIFT_FS_RANGE_MPT * (r - r_max) / (r_min - r_max);
}

/* The target in thousandths of a packet time */
static inline __u64 swift_target_mpt(__u64 cwnd_milli, __u32 hops)
{
	return SWIFT_BASE_MPT + (__u64)hops * SWIFT_HOP_MPT + swift_flow_mpt(cwnd_milli);
}

#endif

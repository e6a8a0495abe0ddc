// SPDX-License-Identifier: GPL-2.0
/* MLTCP (Rajasekaran et al., HotNets'24) on Reno, as a BPF struct_ops program registered as
 * "mltcp". A training flow's additive increase is scaled by a function of how far it is
 * into the current iteration's communication, so that the flow further along finishes
 * first; over iterations, competing jobs' communication phases slide apart.
 *
 *   F(bytes_ratio) = MLTCP_INTERCEPT + MLTCP_SLOPE * bytes_ratio
 *   bytes_ratio    = bytes acknowledged since this phase began / bytes of the last phase
 *
 * Per flow: a phase begins when the flow sends after an idle gap (the kernel's
 * CA_EVENT_TX_START) longer than MLTCP_GAP_RTTS minimum RTTs and than a quarter of the
 * previous phase's busy time (its duration less the gaps it waited through); the previous
 * phase's bytes are its total. The window grows by F packets per RTT instead of one; slow
 * start, the loss and ECN reactions are Reno's.
 *
 * The gap is measured from the last ACK that acknowledged data: a collective's peer often
 * sends first, and its data carries an ACK that acknowledges nothing. The busy-time term
 * keeps a collective's own waits (for a peer's next chunk, a few RTTs of the queue) inside
 * its phase, while the compute between iterations ends it. A phase that has been busy half
 * as long again as the previous one has missed its end (a compute gap shorter than a
 * quarter of the communication, or jitter): its next gap past the RTT test ends it, and
 * its busy time does not become the reference, so one missed end does not lengthen the
 * term and miss the next.
 *
 * F's slope and intercept are the testbed's (1 + 3 * bytes_ratio, the same function as the
 * MLTCP-like switch weights of the jobs experiment), not the paper's, which were not at
 * hand; edit the #defines in a copy (with its own .name and struct_ops variable) to change
 * them. Traced once per window grown: F in 1024ths.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tbcc.h"

char _license[] SEC("license") = "GPL";

#ifndef MLTCP_SLOPE
#define MLTCP_SLOPE 3072           /* 3, in 1024ths */
#endif
#ifndef MLTCP_INTERCEPT
#define MLTCP_INTERCEPT 1024       /* 1 */
#endif
#ifndef MLTCP_GAP_RTTS
#define MLTCP_GAP_RTTS 8
#endif

struct mltcp {                     /* lives in icsk_ca_priv (104 bytes) */
	__u64 phase_start;         /* tp->bytes_acked when this phase began */
	__u64 last_total;          /* bytes of the previous phase (0: none yet) */
	__u64 last_ack_us;         /* when data was last acknowledged (tp->tcp_mstamp) */
	__u64 acked_seen;          /* tp->bytes_acked then */
	__u64 phase_us;            /* when this phase began */
	__u64 idle_us;             /* the gaps this phase waited through */
	__u64 last_busy_us;        /* the previous phase's busy time */
};

SEC("struct_ops/mltcp_init")
void BPF_PROG(mltcp_init, struct sock *sk)
{
	struct mltcp *ca = inet_csk_ca(sk);

	ca->phase_start = ca->acked_seen = tcp_sk(sk)->bytes_acked;
	ca->last_total = 0;
	ca->last_ack_us = ca->phase_us = tcp_sk(sk)->tcp_mstamp;
	ca->idle_us = ca->last_busy_us = 0;
}

SEC("struct_ops/mltcp_cwnd_event")
void BPF_PROG(mltcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp *ca = inet_csk_ca(sk);
	__u64 gap = tp->tcp_mstamp - ca->last_ack_us, busy = 0;

	/* in minimum RTTs: the smoothed RTT grows with the very queues two jobs' phases
	 * build, until a compute gap no longer counts as one and phases merge */
	if (ev != CA_EVENT_TX_START || gap <= (__u64)MLTCP_GAP_RTTS * tp->rtt_min.s[0].v)
		return;
	if (ca->last_ack_us > ca->phase_us + ca->idle_us)
		busy = ca->last_ack_us - ca->phase_us - ca->idle_us;
	if (gap <= ca->last_busy_us / 4) {
		if (busy <= ca->last_busy_us * 3 / 2) {
			ca->idle_us += gap;        /* a wait inside the phase */
			return;
		}
		busy = ca->last_busy_us;  /* ends a phase that missed its end; not a reference */
	}
	if (tp->bytes_acked > ca->phase_start) {  /* a new iteration: the last one's total */
		ca->last_total = tp->bytes_acked - ca->phase_start;
		ca->last_busy_us = busy;
		tbcc_trace(sk, TBCC_PHASE_BYTES, (__u32)ca->last_total, 0, (__u32)(gap / 1000));
	}
	ca->phase_start = tp->bytes_acked;
	ca->phase_us = tp->tcp_mstamp;
	ca->idle_us = 0;
}

/* called on every ACK while data is outstanding, also when it acknowledges nothing */
SEC("struct_ops/mltcp_pkts_acked")
void BPF_PROG(mltcp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp *ca = inet_csk_ca(sk);

	if (tp->bytes_acked != ca->acked_seen) {
		ca->acked_seen = tp->bytes_acked;
		ca->last_ack_us = tp->tcp_mstamp;
	}
}

/* F in 1024ths: the intercept until a first phase has been seen */
static __always_inline __u32 mltcp_factor(struct tcp_sock *tp, struct mltcp *ca)
{
	__u64 done = tp->bytes_acked - ca->phase_start, ratio;

	if (!ca->last_total)
		return MLTCP_INTERCEPT;
	ratio = done * 1024 / ca->last_total;
	if (ratio > 1024)
		ratio = 1024;
	return MLTCP_INTERCEPT + (__u32)(ratio * MLTCP_SLOPE / 1024);
}

SEC("struct_ops/mltcp_cong_avoid")
void BPF_PROG(mltcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp *ca = inet_csk_ca(sk);
	__u32 f;

	if (!tbcc_is_cwnd_limited(tp))
		return;                   /* as Reno: an unused window does not grow */
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	f = mltcp_factor(tp, ca);
	/* one packet per w acknowledged: F packets per window of cwnd */
	tcp_cong_avoid_ai(tp, tbcc_max(tp->snd_cwnd * 1024 / f, 1), acked);
	if (tp->snd_cwnd_cnt == 0)
		tbcc_trace(sk, TBCC_SCALE, f, 0, acked);
}

SEC("struct_ops/mltcp_ssthresh")
__u32 BPF_PROG(mltcp_ssthresh, struct sock *sk) { return tcp_reno_ssthresh(sk); }

SEC("struct_ops/mltcp_undo_cwnd")
__u32 BPF_PROG(mltcp_undo_cwnd, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops tb_mltcp = {
	.init		= (void *)mltcp_init,
	.cwnd_event	= (void *)mltcp_cwnd_event,
	.pkts_acked	= (void *)mltcp_pkts_acked,
	.cong_avoid	= (void *)mltcp_cong_avoid,
	.ssthresh	= (void *)mltcp_ssthresh,
	.undo_cwnd	= (void *)mltcp_undo_cwnd,
	.name		= "mltcp",
};

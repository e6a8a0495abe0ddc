// SPDX-License-Identifier: GPL-2.0
/* Your own congestion control, as the testbed runs it: TCP Vegas's idea (Brakmo et al.,
 * SIGCOMM'94) in a few lines. Once per RTT, estimate how many of this flow's packets wait
 * in queues, cwnd * (rtt - base_rtt) / rtt, and keep it between ALPHA and BETA packets: a
 * target in packets means the same at 10 Mb/s as at 100 Gb/s. Select it with
 *   hosts: {congestion_control: {bpf: examples/cc/vegas.bpf.c}}
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tbcc.h"

char _license[] SEC("license") = "GPL";

#define ALPHA 2
#define BETA 4

struct vegas {                 /* per connection, in icsk_ca_priv (104 bytes at most) */
	__u32 next_seq;        /* the RTT ends when this is acknowledged */
	__u32 rtt_us;          /* the latest RTT sample */
};

SEC("struct_ops/vegas_init")
void BPF_PROG(vegas_init, struct sock *sk)
{
	struct vegas *v = inet_csk_ca(sk);

	v->next_seq = tcp_sk(sk)->snd_nxt;
	v->rtt_us = 0;
}

SEC("struct_ops/vegas_pkts_acked")
void BPF_PROG(vegas_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	if (sample->rtt_us > 0)
		((struct vegas *)inet_csk_ca(sk))->rtt_us = sample->rtt_us;
}

SEC("struct_ops/vegas_cong_avoid")
void BPF_PROG(vegas_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct vegas *v = inet_csk_ca(sk);
	__u32 base = tp->rtt_min.s[0].v, queued;

	if (tbcc_before(ack, v->next_seq) || !v->rtt_us || v->rtt_us < base) {
		if (tp->snd_cwnd < tp->snd_ssthresh)
			tcp_slow_start(tp, acked);   /* doubling per RTT until queues build */
		return;
	}
	v->next_seq = tp->snd_nxt;
	queued = (__u64)tp->snd_cwnd * (v->rtt_us - base) / v->rtt_us;
	if (queued > BETA) {
		tp->snd_cwnd = tbcc_max(tp->snd_cwnd - 1, 2);
		tp->snd_ssthresh = tp->snd_cwnd;    /* slow start ends for good */
	} else if (queued < ALPHA) {
		tp->snd_cwnd++;
	}
	tbcc_trace(sk, TBCC_QUEUED_PKTS, queued, 0, acked);   /* a row of cc_trace.csv */
}

SEC("struct_ops/vegas_ssthresh")
__u32 BPF_PROG(vegas_ssthresh, struct sock *sk) { return tcp_reno_ssthresh(sk); }

SEC("struct_ops/vegas_undo_cwnd")
__u32 BPF_PROG(vegas_undo_cwnd, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops my_vegas = {
	.init		= (void *)vegas_init,
	.pkts_acked	= (void *)vegas_pkts_acked,
	.cong_avoid	= (void *)vegas_cong_avoid,
	.ssthresh	= (void *)vegas_ssthresh,
	.undo_cwnd	= (void *)vegas_undo_cwnd,
	.name		= "my_vegas",     /* what hosts select; not a name the kernel has */
};

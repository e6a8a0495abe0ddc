// SPDX-License-Identifier: GPL-2.0
/* A Swift-like delay-based congestion control (Kumar et al., SIGCOMM'20), as a BPF
 * struct_ops program registered as "swift".
 *
 * Each ACK's RTT sample is held against a target: the connection's minimum RTT (what the
 * path costs when empty: this stands in for Swift's fixed base of propagation and
 * serialisation, which in an emulator is the emulator's own delay) plus Swift's target in
 * packet times (swift_target.h: a base, a term per switch on the path, and a term that
 * grows as the window shrinks, so that many flows settle on a larger queue). Below the
 * target the window grows by AI packets per RTT; above it, it shrinks by
 * BETA * (delay - target) / delay, at most MAX_MDF, at most once per RTT. A loss halves it
 * (MAX_MDF). Until the first time the delay exceeds the target, the kernel's slow start
 * runs (Swift has none: its windows start where the last flow left them).
 *
 * The testbed fills two maps per phase: `tbcc_config` (the hosts' link rate and frame
 * size, from which a packet time follows) and `tbcc_hops` (switches on the path between
 * two hosts). Every decision is traced (tbcc.h): the target in microseconds.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tbcc.h"
#include "swift_target.h"

char _license[] SEC("license") = "GPL";

#define SWIFT_AI_MILLI 1000        /* additive increase: 1 packet per RTT */
#define SWIFT_BETA_MILLI 800       /* multiplicative decrease: 0.8 */
#define SWIFT_MAX_MDF_MILLI 500    /* at most halve the window at once */

struct tbcc_config {
	__u32 link_mbps;           /* the hosts' link rate */
	__u32 frame_bytes;         /* a full frame on the wire */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tbcc_config);
} tbcc_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);        /* source address << 32 | destination address (network order) */
	__type(value, __u32);      /* switches on the path */
} tbcc_hops SEC(".maps");

struct swift {                     /* lives in icsk_ca_priv (104 bytes) */
	__u64 t_last_decrease_us;
	__u32 target_us;
	__u32 hops;
	__u32 pkt_ns;
	__u32 above;               /* the last RTT sample was above the target */
};

static __always_inline void swift_path(struct sock *sk, struct swift *ca)
{
	__u32 zero = 0;
	__u64 key = ((__u64)sk->__sk_common.skc_rcv_saddr << 32) | sk->__sk_common.skc_daddr;
	struct tbcc_config *cfg = bpf_map_lookup_elem(&tbcc_config, &zero);
	__u32 *hops = bpf_map_lookup_elem(&tbcc_hops, &key);

	ca->hops = hops ? *hops : 0;
	ca->pkt_ns = 120000;       /* 1500-byte frames at 100 Mb/s until told */
	if (cfg && cfg->link_mbps)
		ca->pkt_ns = cfg->frame_bytes * 8000 / cfg->link_mbps;
}

SEC("struct_ops/swift_init")
void BPF_PROG(swift_init, struct sock *sk)
{
	struct swift *ca = inet_csk_ca(sk);

	ca->t_last_decrease_us = 0;
	ca->target_us = 0;
	ca->above = 0;
	swift_path(sk, ca);
}

static __always_inline __u32 swift_target_us(struct sock *sk, struct swift *ca)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	__u64 mpt = swift_target_mpt((__u64)tp->snd_cwnd * 1000, ca->hops);

	/* the path's own delay, then the queueing Swift allows, in packet times */
	return tp->rtt_min.s[0].v + (__u32)(mpt * ca->pkt_ns / 1000 / 1000);
}

SEC("struct_ops/swift_pkts_acked")
void BPF_PROG(swift_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct swift *ca = inet_csk_ca(sk);
	__u32 delay = sample->rtt_us, cwnd = tp->snd_cwnd, factor, next;
	__u64 now = tp->tcp_mstamp;

	if (sample->rtt_us <= 0)
		return;
	ca->target_us = swift_target_us(sk, ca);
	ca->above = delay > ca->target_us;
	if (!ca->above || now - ca->t_last_decrease_us < (tp->srtt_us >> 3))
		return;                   /* below the target, or decreased within this RTT */
	/* 1 - beta * (delay - target) / delay, at least 1 - max_mdf */
	factor = 1000 - (__u32)((__u64)SWIFT_BETA_MILLI * (delay - ca->target_us) / delay);
	factor = tbcc_max(factor, 1000 - SWIFT_MAX_MDF_MILLI);
	next = tbcc_max((__u32)((__u64)cwnd * factor / 1000), 2U);
	tp->snd_ssthresh = next;          /* leaves slow start for good */
	if (next < cwnd) {
		tp->snd_cwnd = next;
		ca->t_last_decrease_us = now;
		tbcc_trace(sk, TBCC_TARGET_US, ca->target_us, 1, sample->pkts_acked);
	}
}

SEC("struct_ops/swift_cong_avoid")
void BPF_PROG(swift_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct swift *ca = inet_csk_ca(sk);

	if (ca->above)
		return;                   /* above the target: no growth, decreases only */
	if (!tbcc_is_cwnd_limited(tp))
		return;                   /* an unused window does not grow */
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	/* below the target (or no sample yet): AI packets per RTT */
	tcp_cong_avoid_ai(tp, tp->snd_cwnd * 1000 / SWIFT_AI_MILLI, acked);
	if (tp->snd_cwnd_cnt == 0)  /* once per window grown */
		tbcc_trace(sk, TBCC_TARGET_US, ca->target_us, 0, acked);
}

SEC("struct_ops/swift_ssthresh")
__u32 BPF_PROG(swift_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct swift *ca = inet_csk_ca(sk);

	ca->t_last_decrease_us = tp->tcp_mstamp;
	return tbcc_max(tp->snd_cwnd * (1000 - SWIFT_MAX_MDF_MILLI) / 1000, 2U);
}

SEC("struct_ops/swift_undo_cwnd")
__u32 BPF_PROG(swift_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops tb_swift = {
	.init		= (void *)swift_init,
	.pkts_acked	= (void *)swift_pkts_acked,
	.cong_avoid	= (void *)swift_cong_avoid,
	.ssthresh	= (void *)swift_ssthresh,
	.undo_cwnd	= (void *)swift_undo_cwnd,
	.name		= "swift",
};

/* What the testbed's BPF congestion controls share (and a user's own may include):
 * the kernel functions a struct_ops TCP congestion control may call, the few helpers of
 * the kernel's tcp.h that are inline there, and a trace of the algorithm's state.
 *
 * Include after "vmlinux.h" (generated from the running kernel's BTF) and the libbpf
 * headers. The testbed compiles with -I pointing at this directory.
 *
 * The trace: tbcc_trace(sk, state, value, marks) appends one record to the ring buffer
 * `tbcc_events`; the testbed drains it during the run into cc_trace.csv (per flow: time,
 * cwnd, ssthresh, srtt, the algorithm's own state word and value, and its mark count).
 */
#ifndef TBCC_H
#define TBCC_H

#include <bpf/bpf_core_read.h>

/* macros of the kernel's headers, which vmlinux.h (types and enums only) lacks; the
 * ICSK_ACK_* flags are enum values and come from vmlinux.h */
#define TCP_ECN_OK          1
#define TCP_ECN_DEMAND_CWR  4
#define TCP_CONG_NEEDS_ECN  0x2

/* kfuncs a BPF tcp_congestion_ops may call (net/ipv4/bpf_tcp_ca.c) */
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void *inet_csk_ca(const struct sock *sk)
{
	return (void *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline int tbcc_before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline __u32 tbcc_min(__u32 a, __u32 b) { return a < b ? a : b; }
static __always_inline __u32 tbcc_max(__u32 a, __u32 b) { return a > b ? a : b; }

/* The kernel's tcp_is_cwnd_limited (include/net/tcp.h): whether the window, not the
 * application, limited the last window's sending; in slow start, until the window is twice
 * what was in flight. The kernel's own algorithms grow the window only then (Reno's
 * cong_avoid returns otherwise), so that a flow waiting on its application does not arrive
 * at its next burst with a window it never tested. */
static __always_inline int tbcc_is_cwnd_limited(const struct tcp_sock *tp)
{
	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return 1;
	return tp->snd_cwnd < tp->snd_ssthresh && tp->snd_cwnd < 2 * tp->max_packets_out;
}

/* One record of the trace (little-endian, packed as the testbed reads it:
 * testbed/dataplane/hostcc.py TRACE_RECORD). */
struct tbcc_event {
	__u64 t_ns;        /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 saddr;       /* network order */
	__u32 daddr;       /* network order */
	__u16 sport;       /* host order */
	__u16 dport;       /* host order */
	__u32 cwnd;        /* segments */
	__u32 ssthresh;    /* segments; 0x7fffffff until a loss or a mark */
	__u32 srtt_us;     /* smoothed RTT */
	__u32 state;       /* what `value` is: TBCC_ALPHA, TBCC_TARGET_US, ... */
	__u32 value;
	__u32 marks;       /* DCTCP: CE-echoed packets in the window this closes;
			    * swift: 1 when the record is a decrease */
	__u32 delivered;   /* packets delivered in that window (acknowledged by the ACK) */
};

#define TBCC_ALPHA      1  /* DCTCP's alpha, scaled by 1024 */
#define TBCC_TARGET_US  2  /* a delay target, microseconds */
#define TBCC_SCALE      3  /* a multiplier, scaled by 1024 */
#define TBCC_QUEUED_PKTS 4 /* packets of the flow estimated to wait in queues */
#define TBCC_PHASE_BYTES 5 /* bytes of a communication phase that just ended */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} tbcc_events SEC(".maps");

static __always_inline void tbcc_trace(struct sock *sk, __u32 state, __u32 value,
				       __u32 marks, __u32 delivered)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct tbcc_event *e = bpf_ringbuf_reserve(&tbcc_events, sizeof(*e), 0);

	if (!e)
		return;  /* the ring is full (the drain fell behind): this record is lost */
	e->t_ns = bpf_ktime_get_ns();
	e->saddr = sk->__sk_common.skc_rcv_saddr;
	e->daddr = sk->__sk_common.skc_daddr;
	e->sport = sk->__sk_common.skc_num;
	e->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->srtt_us = tp->srtt_us >> 3;
	e->state = state;
	e->value = value;
	e->marks = marks;
	e->delivered = delivered;
	bpf_ringbuf_submit(e, 0);
}

#endif

// SPDX-License-Identifier: GPL-2.0
/* DCTCP (Alizadeh et al., SIGCOMM'10; RFC 8257) as the Linux kernel implements it
 * (net/ipv4/tcp_dctcp.c), for kernels built without it, as a BPF struct_ops congestion
 * control. Registered under the kernel's own name, "dctcp".
 *
 * Sender: once per window of data (when snd_una passes the sequence number that was next
 * when the window began), alpha <- (1 - g) * alpha + g * F, where F is the fraction of the
 * window's delivered packets that the receiver echoed as CE-marked and g = 1/2^DCTCP_SHIFT_G
 * = 1/16; alpha is scaled by 1024 and starts at 1024 (the kernel's dctcp_alpha_on_init).
 * On ECE (the kernel's CWR entry) and on loss, ssthresh = cwnd * (1 - alpha / 2), at
 * least 2; growth is Reno's. A loss (fast recovery or RTO) halves the window as Reno does.
 * The kernel counts F in packets (tp->delivered_ce / tp->delivered), not bytes; so does
 * this.
 * Receiver: an ACK echoes exactly the CE state of the packets it covers; when that state
 * changes while an ACK is delayed, the delayed ACK goes out first with the old state
 * (RFC 8257 section 3.2).
 *
 * Each alpha update is traced (tbcc.h) with the window's marks and delivered packets.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tbcc.h"
#include "dctcp_alpha.h"

char _license[] SEC("license") = "GPL";

#ifndef DCTCP_ALPHA_ON_INIT
#define DCTCP_ALPHA_ON_INIT 1024
#endif

struct dctcp {                    /* lives in icsk_ca_priv (104 bytes) */
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
	__u32 no_ecn;             /* ECN not negotiated: Reno */
};

static __always_inline void dctcp_reset(const struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops/dctcp_init")
void BPF_PROG(dctcp_init, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);

	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->alpha = tbcc_min(DCTCP_ALPHA_ON_INIT, DCTCP_MAX_ALPHA);
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	/* a listener or a closed socket has not negotiated yet; a connection that could not
	 * negotiate ECN falls back to Reno (the kernel also stops sending ECT, which a BPF
	 * program cannot: inside the testbed every host accepts ECN) */
	ca->no_ecn = !(tp->ecn_flags & TCP_ECN_OK) &&
		     sk->__sk_common.skc_state != TCP_LISTEN &&
		     sk->__sk_common.skc_state != TCP_CLOSE;
	dctcp_reset(tp, ca);
}

SEC("struct_ops/dctcp_ssthresh")
__u32 BPF_PROG(dctcp_ssthresh, struct sock *sk)
{
	struct dctcp *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	if (ca->no_ecn)
		return tbcc_max(cwnd >> 1U, 2U);
	return tbcc_max(cwnd - ((cwnd * ca->alpha) >> 11U), 2U);
}

SEC("struct_ops/dctcp_update_alpha")
void BPF_PROG(dctcp_update_alpha, struct sock *sk, __u32 flags)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);
	__u32 delivered, delivered_ce;

	if (tbcc_before(tp->snd_una, ca->next_seq))
		return;                   /* the window is not over yet */
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	ca->alpha = dctcp_alpha_next(ca->alpha, delivered, delivered_ce);
	if (delivered)  /* a receiver's windows deliver nothing: not traced */
		tbcc_trace(sk, TBCC_ALPHA, ca->alpha, delivered_ce, delivered);
	dctcp_reset(tp, ca);
}

static __always_inline void dctcp_react_to_loss(struct sock *sk)
{
	struct dctcp *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tbcc_max(tp->snd_cwnd >> 1U, 2U);
}

SEC("struct_ops/dctcp_state")
void BPF_PROG(dctcp_state, struct sock *sk, __u8 new_state)
{
	/* fast recovery halves the window; an RTO is handled in cwnd_event (CA_EVENT_LOSS),
	 * so that a window sees one loss reaction */
	if (new_state == TCP_CA_Recovery && new_state != inet_csk(sk)->icsk_ca_state)
		dctcp_react_to_loss(sk);
}

static __always_inline void dctcp_ece_ack_cwr(struct sock *sk, __u32 ce_state)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (ce_state == 1)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops/dctcp_cwnd_event")
void BPF_PROG(dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct dctcp *ca = inet_csk_ca(sk);
	__u32 new_ce_state;

	if (ev == CA_EVENT_ECN_IS_CE || ev == CA_EVENT_ECN_NO_CE) {
		new_ce_state = ev == CA_EVENT_ECN_IS_CE ? 1 : 0;
		if (ca->ce_state != new_ce_state) {
			/* the CE state changed: an ACK now; a delayed one first, with the old
			 * state, for the packets it covers */
			if (inet_csk(sk)->icsk_ack.pending & ICSK_ACK_TIMER) {
				dctcp_ece_ack_cwr(sk, ca->ce_state);
				bpf_tcp_send_ack(tcp_sk(sk), ca->prior_rcv_nxt);
			}
			inet_csk(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
		}
		ca->prior_rcv_nxt = tcp_sk(sk)->rcv_nxt;
		ca->ce_state = new_ce_state;
		dctcp_ece_ack_cwr(sk, new_ce_state);
	} else if (ev == CA_EVENT_LOSS) {
		dctcp_react_to_loss(sk);
	}
}

SEC("struct_ops/dctcp_cwnd_undo")
__u32 BPF_PROG(dctcp_cwnd_undo, struct sock *sk)
{
	const struct dctcp *ca = inet_csk_ca(sk);

	return tbcc_max(tcp_sk(sk)->snd_cwnd, ca->loss_cwnd);
}

SEC("struct_ops/dctcp_cong_avoid")
void BPF_PROG(dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC(".struct_ops")
struct tcp_congestion_ops tb_dctcp = {
	.init		= (void *)dctcp_init,
	.in_ack_event	= (void *)dctcp_update_alpha,
	.cwnd_event	= (void *)dctcp_cwnd_event,
	.ssthresh	= (void *)dctcp_ssthresh,
	.cong_avoid	= (void *)dctcp_cong_avoid,
	.undo_cwnd	= (void *)dctcp_cwnd_undo,
	.set_state	= (void *)dctcp_state,
	.flags		= TCP_CONG_NEEDS_ECN,
	.name		= "dctcp",
};

/* A UEC-like NSCC: the Ultra Ethernet transport's network-signal-based congestion control
 * as the UEC's own simulator model runs it (ultraethernet/uet-htsim, htsim/sim/uec.cpp:
 * updateCwndOnAck_NSCC, quick_adapt, fair_increase, proportional_increase, fast_increase,
 * multiplicative_decrease, fulfill_adjustment, updateCwndOnNack_NSCC). A window, no pacing
 * beyond the line, changed on every ACK by two signals of the packet it acknowledges: its
 * ECN mark (echoed by the receiver) and its queueing delay, the RTT less the base RTT T:
 *
 *   no mark, delay >= target:  fair increase, inc += fi * acked
 *   no mark, delay <  target:  after a window of ACKs below fast_ns, cwnd += fi_scale acked
 *                              (fast increase); else inc += alpha acked (target - delay)
 *   mark, delay >= target:     fast increase ends; once per T, if the delay's EWMA is
 *                              above target, cwnd *= max(1 - gamma (avg - target) / avg,
 *                              md_floor)
 *   mark, delay <  target:     nothing
 *   every 8 packets acknowledged or T: cwnd += inc / cwnd (and + eta once per T)
 *   quick adapt, checked every T + target: when the delay exceeded qa_delay or a loss
 *   came and less than maxwnd / 2^qa_gate was acknowledged meanwhile, cwnd = what was
 *   acknowledged, and the marks on the packets then in flight are ignored
 *   a loss: quick adapt is due, and cwnd loses one packet (unless quick adapt took it)
 *   cwnd within [one packet, maxwnd = 1.5 BDP]; the delay's EWMA weighs 1/80 and takes
 *   only valid samples (an RTT of T or more); without one the delay is the EWMA.
 *
 * Its constants are the model's at its reference network (100 Gb/s, a 12 us round trip,
 * 4086-byte packets), as shares of that network's BDP and round trip, applied to the
 * emulated network's (its link rate and measured T): the algorithm sees the same
 * network, in round trips and BDPs, with fewer, larger packets per BDP. Pure arithmetic
 * on the state (the engine calls it and the unit tests run the very code). */
#ifndef NSCC_H
#define NSCC_H

#include <stdint.h>

struct nscc_params {
	double mtu;                  /* bytes of one packet: the least window */
	double maxwnd;               /* bytes */
	double fi, eta;              /* bytes */
	double alpha;                /* bytes of increase per byte acknowledged per ns below */
	double fi_scale, gamma, md_floor, delay_alpha;
	double fulfil_bytes;
	uint64_t base_rtt_ns, target_ns, fast_ns, qa_delay_ns;
	uint32_t qa_gate;
};

struct nscc {
	double cwnd, inc, avg_delay, achieved, received, fi_count, ignored, to_ignore;
	uint64_t last_adjust_ns, last_dec_ns, qa_end_ns;
	int increase, trigger_qa;
	uint64_t updates, cuts, quick_adapts;
};

static inline void nscc_init(struct nscc *n, const struct nscc_params *p, uint64_t now)
{
	n->cwnd = p->maxwnd;
	n->inc = n->avg_delay = n->achieved = n->received = n->fi_count = 0;
	n->ignored = n->to_ignore = 0;
	n->last_adjust_ns = now;
	n->last_dec_ns = 0;
	n->qa_end_ns = 0;
	n->increase = n->trigger_qa = 0;
	n->updates = n->cuts = n->quick_adapts = 0;
}

static inline void nscc_clamp(struct nscc *n, const struct nscc_params *p)
{
	if (n->cwnd > p->maxwnd)
		n->cwnd = p->maxwnd;
	if (n->cwnd < p->mtu)
		n->cwnd = p->mtu;
}

/* the delay's EWMA; a sample above target without a mark counts as a quarter of T */
static inline void nscc_delay(struct nscc *n, const struct nscc_params *p, int ecn,
			      double delay)
{
	double sample = !ecn && delay > (double)p->target_ns ? (double)p->base_rtt_ns / 4 : delay;

	n->avg_delay = p->delay_alpha * sample + (1 - p->delay_alpha) * n->avg_delay;
}

/* 1 when quick adapt took this ACK (the window set, or a mark ignored) */
static inline int nscc_quick_adapt(struct nscc *n, const struct nscc_params *p, uint64_t now,
				   int loss, int ecn, double delay, double in_flight)
{
	int taken = 0;

	if (n->ignored < n->to_ignore && ecn) {
		n->inc = n->received = 0;
		return 1;
	}
	if (now > n->qa_end_ns) {
		if (n->qa_end_ns && (n->trigger_qa || loss || delay > (double)p->qa_delay_ns) &&
		    n->achieved < p->maxwnd / (double)(1u << p->qa_gate)) {
			n->cwnd = n->achieved > p->mtu ? n->achieved : p->mtu;
			n->to_ignore = in_flight;
			n->ignored = 0;
			n->trigger_qa = 0;
			n->quick_adapts++;
			n->cuts++;
			taken = 1;
		}
		n->achieved = 0;
		n->qa_end_ns = now + p->base_rtt_ns + p->target_ns;
	}
	if (taken)
		n->inc = n->received = 0;
	return taken;
}

static inline void nscc_fulfil(struct nscc *n, const struct nscc_params *p, uint64_t now)
{
	if (n->received <= p->fulfil_bytes && now - n->last_adjust_ns <= p->base_rtt_ns)
		return;
	n->cwnd += n->inc / n->cwnd;
	if (now - n->last_adjust_ns >= p->base_rtt_ns) {
		n->cwnd += p->eta;
		n->last_adjust_ns = now;
	}
	n->inc = n->received = 0;
	nscc_clamp(n, p);
}

/* an ACK newly acknowledging `acked` bytes; `rtt_ns` its packet's round trip (0: none),
 * `ecn` its packet's mark, `in_flight` the bytes still unacknowledged */
static inline void nscc_on_ack(struct nscc *n, const struct nscc_params *p, uint64_t now,
			       double acked, uint64_t rtt_ns, int ecn, double in_flight)
{
	double delay, target = (double)p->target_ns;

	n->achieved += acked;
	n->received += acked;
	n->ignored += acked;
	n->updates++;
	if (rtt_ns >= p->base_rtt_ns) {    /* a valid sample (none: no RTT, or below T) */
		delay = (double)(rtt_ns - p->base_rtt_ns);
		nscc_delay(n, p, ecn, delay);
	} else {
		delay = n->avg_delay;
	}
	if (nscc_quick_adapt(n, p, now, 0, ecn, delay, in_flight))
		return;
	if (!ecn && delay >= target) {
		n->inc += p->fi * acked;
	} else if (!ecn) {
		if (delay < (double)p->fast_ns) {
			n->fi_count += acked;
			if (n->fi_count > n->cwnd || n->increase) {
				n->cwnd += acked * p->fi_scale;
				n->increase = 1;
			}
		} else {
			n->fi_count = 0;
			n->increase = 0;
		}
		if (!n->increase)
			n->inc += p->alpha * acked * (target - delay);
	} else if (delay >= target) {
		n->fi_count = 0;             /* a marked ACK over target ends fast increase */
		n->increase = 0;
		if (n->avg_delay > target && now - n->last_dec_ns > p->base_rtt_ns) {
			double f = 1 - p->gamma * (n->avg_delay - target) / n->avg_delay;

			n->cwnd *= f > p->md_floor ? f : p->md_floor;
			n->last_dec_ns = now;
			n->cuts++;
		}
	}
	nscc_clamp(n, p);
	nscc_fulfil(n, p, now);
}

/* a loss (a NAK or a timeout) of a packet of `bytes` */
static inline void nscc_on_loss(struct nscc *n, const struct nscc_params *p, uint64_t now,
				double bytes, double in_flight)
{
	n->ignored += bytes;
	nscc_delay(n, p, 1, (double)p->base_rtt_ns);   /* as the model: a sample of T */
	n->trigger_qa = 1;
	if (!nscc_quick_adapt(n, p, now, 1, 1, 0, in_flight)) {
		n->cwnd -= bytes;
		n->cuts++;
	}
	nscc_clamp(n, p);
}

#endif

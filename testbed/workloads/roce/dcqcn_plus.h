/* DCQCN+ (Gao et al., ICNP'18, "Taming large-scale incast congestion in RDMA over
 * Ethernet networks"): DCQCN whose CNP period and rate-increase timers follow the number
 * of flows congested at the receiver, so that N flows recovering together do not recover
 * N times too fast. The paper's text was not at hand: the rules below are those of a
 * third-party reimplementation in the HPCC code base (Networked-System-and-Security-Group/
 * ParaleonPlus, rdma-hw.cc, scheme dcqcn_plus), which follows the paper's abstract.
 *
 * Notification point (the receiver; the engine runs it): the QPs that received CE marks
 * (forgotten after `entry_timeout` without one) are visited round-robin, one every `scan`;
 * a visited QP with a mark pending and no CNP for `min_interval` gets one. Its per-flow CNP
 * period is thus about max(min_interval, N scan) for N congested flows, and each CNP tells
 * the sender tau = N scan (in its reserved bytes).
 *
 * Reaction point (here): on a CNP, alpha <- min(1, (1 - g) alpha + g), Rt <- Rc,
 * Rc <- max(min, Rc (1 - alpha/2)), stage 0, and the period T = max(min_tau, tau, one
 * packet's time at Rc): alpha decays by (1 - g) every T, an increase event comes every 2T:
 *   stage < F:  Rc <- (Rc + Rt) / 2                                     (fast recovery)
 *   stage = F:  Rt += alpha > 0.1 ? min(Rc/5, line/50) : min(Rc/10, line/100), Rc as above
 *   stage > F:  Rt += min(Rc, max(1, stage - 4F + 1) line/100), Rc as above    (hyper)
 *   Rt and Rc at most the line rate.
 * Pure arithmetic on the state and `now` (ns): the engine calls it and the unit tests run
 * the very code. Parameters arrive scaled to the emulated link. */
#ifndef DCQCN_PLUS_H
#define DCQCN_PLUS_H

#include <stdint.h>

struct dcqcnp_params {
	double g, min_bps, line_bps;
	uint64_t min_tau_ns;
	uint32_t f;
};

struct dcqcnp {
	double rc, rt, alpha;
	uint64_t period_ns, next_alpha_ns, next_inc_ns;
	uint32_t stage;
	uint64_t cuts, increases;
};

static inline void dcqcnp_init(struct dcqcnp *d, const struct dcqcnp_params *p)
{
	d->rc = d->rt = p->line_bps;
	d->alpha = 1.0;
	d->period_ns = p->min_tau_ns;
	d->next_alpha_ns = d->next_inc_ns = UINT64_MAX;   /* from the first CNP on */
	d->stage = 0;
	d->cuts = d->increases = 0;
}

static inline double dcqcnp_min(double a, double b)
{
	return a < b ? a : b;
}

/* a CNP telling tau_ns; pkt_bits: one packet on the wire, to time it at the new rate */
static inline void dcqcnp_on_cnp(struct dcqcnp *d, const struct dcqcnp_params *p, uint64_t now,
				 uint64_t tau_ns, double pkt_bits)
{
	uint64_t t, pkt_ns;

	d->alpha = dcqcnp_min(1.0, (1 - p->g) * d->alpha + p->g);
	d->rt = d->rc;
	d->rc *= 1 - d->alpha / 2;
	if (d->rc < p->min_bps)
		d->rc = p->min_bps;
	d->stage = 0;
	pkt_ns = (uint64_t)(pkt_bits * 1e9 / d->rc);
	t = p->min_tau_ns > tau_ns ? p->min_tau_ns : tau_ns;
	d->period_ns = t > pkt_ns ? t : pkt_ns;
	d->next_alpha_ns = now + d->period_ns;
	d->next_inc_ns = now + 2 * d->period_ns;
	d->cuts++;
}

static inline void dcqcnp_event(struct dcqcnp *d, const struct dcqcnp_params *p)
{
	double step = 0;
	int64_t hyper = (int64_t)d->stage - 4 * (int64_t)p->f + 1;

	if (d->stage == p->f)
		step = d->alpha > 0.1 ? dcqcnp_min(d->rc / 5, p->line_bps / 50) :
			dcqcnp_min(d->rc / 10, p->line_bps / 100);
	else if (d->stage > p->f)
		step = dcqcnp_min(d->rc, (double)(hyper > 1 ? hyper : 1) * p->line_bps / 100);
	d->rt = dcqcnp_min(p->line_bps, d->rt + step);
	d->rc = dcqcnp_min(p->line_bps, (d->rc + d->rt) / 2);
	d->stage++;
	d->increases++;
}

static inline void dcqcnp_on_time(struct dcqcnp *d, const struct dcqcnp_params *p, uint64_t now)
{
	while (now >= d->next_alpha_ns) {
		d->alpha *= 1 - p->g;
		d->next_alpha_ns += d->period_ns;
	}
	while (now >= d->next_inc_ns) {
		dcqcnp_event(d, p);
		d->next_inc_ns += 2 * d->period_ns;
	}
}

static inline uint64_t dcqcnp_next_ns(const struct dcqcnp *d)
{
	return d->next_alpha_ns < d->next_inc_ns ? d->next_alpha_ns : d->next_inc_ns;
}

#endif

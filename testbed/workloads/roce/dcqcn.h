/* DCQCN's reaction point (Zhu et al., SIGCOMM'15) as its authors' ns-3 code implements it
 * (bobzhuyb/ns3-rdma, src/point-to-point/model/qbb-net-device.cc: rpr_cnm_received,
 * ResumeAlpha, rpr_fast_*, rpr_active_*, rpr_hyper_*, AdjustRates), with the target rate
 * clamped on every CNP (its CLAMP_TARGET_RATE 1):
 *
 *   on a CNP:    Rt <- Rc; alpha <- (1 - g) alpha + g; Rc <- max(min, Rc (1 - alpha/2));
 *                both stages to 0, fast recovery; the alpha timer, the increase timer and
 *                the byte counter start again
 *   alpha timer: every alpha_ns after the last CNP, alpha <- (1 - g) alpha
 *   an increase event, from the timer (every timer_ns) or the byte counter (every
 *   byte_counter bytes sent), first counts in its own stage, then:
 *     fast recovery, its own stage < F:  Rc <- (Rt + Rc) / 2
 *     else, either stage < F:            additive: Rt += R_AI, then Rc <- (Rt + Rc) / 2
 *     else (both >= F, or hyper once):  hyper: Rt += (min stage - F + 1) R_HAI, Rc as above;
 *                                        in hyper, the timer and byte counter run at half
 *   on an event while either stage is 1 (the first after a CNP), a target above 10 Rc is
 *   divided by 8 instead;
 *   Rc never exceeds the line rate.
 *
 * ns3-rdma updates alpha before the cut, and so does this.
 * Pure arithmetic on the state and `now` (ns): the engine calls it and the unit tests run
 * the very code. The parameters arrive scaled to the emulated link
 * (testbed/workloads/model/rdma.py keeps them in the paper's units). */
#ifndef DCQCN_H
#define DCQCN_H

#include <stdint.h>

struct dcqcn_params {
	double g;                    /* alpha's gain */
	uint64_t alpha_ns;           /* alpha's decay period */
	uint64_t timer_ns;           /* the rate-increase timer */
	uint64_t byte_counter;       /* bytes per increase event; 0: no byte counter */
	uint32_t f;                  /* fast-recovery events */
	double rai_bps, rhai_bps, min_bps, line_bps;
};

enum { DCQCN_FAST = 1, DCQCN_ACTIVE = 2, DCQCN_HYPER = 3 };

struct dcqcn {
	double rc, rt, alpha;
	uint64_t next_alpha_ns, next_inc_ns;
	uint64_t bytes_left;         /* until the byte counter's next event */
	uint32_t t_stage, b_stage, stage;
	uint64_t cuts, increases;
};

static inline void dcqcn_init(struct dcqcn *d, const struct dcqcn_params *p, uint64_t now)
{
	(void)now;
	d->rc = d->rt = p->line_bps;
	d->alpha = 1.0;
	/* the timers start with the first CNP: at the line rate there is nothing to recover */
	d->next_alpha_ns = d->next_inc_ns = UINT64_MAX;
	d->bytes_left = p->byte_counter;
	d->t_stage = d->b_stage = 0;
	d->stage = DCQCN_FAST;
	d->cuts = d->increases = 0;
}

static inline void dcqcn_adjust(struct dcqcn *d, const struct dcqcn_params *p, double inc)
{
	if ((d->b_stage == 1 || d->t_stage == 1) && d->rt > 10 * d->rc)
		d->rt /= 8;
	else
		d->rt += inc;
	d->rc = d->rc / 2 + d->rt / 2;
	if (d->rc > p->line_bps)
		d->rc = p->line_bps;
	d->increases++;
}

static inline void dcqcn_hyper(struct dcqcn *d, const struct dcqcn_params *p)
{
	uint32_t lo = d->b_stage < d->t_stage ? d->b_stage : d->t_stage;

	dcqcn_adjust(d, p, p->rhai_bps * (lo - p->f + 1));
	d->stage = DCQCN_HYPER;
}

static inline void dcqcn_select(struct dcqcn *d, const struct dcqcn_params *p)
{
	if (d->b_stage < p->f || d->t_stage < p->f) {
		dcqcn_adjust(d, p, p->rai_bps);
		d->stage = DCQCN_ACTIVE;
	} else {
		dcqcn_hyper(d, p);
	}
}

/* an increase event whose own stage was just counted */
static inline void dcqcn_event(struct dcqcn *d, const struct dcqcn_params *p, uint32_t own)
{
	if (d->stage == DCQCN_FAST) {
		if (own < p->f)
			dcqcn_adjust(d, p, 0);
		else
			dcqcn_select(d, p);
	} else if (d->stage == DCQCN_ACTIVE) {
		dcqcn_select(d, p);
	} else {
		dcqcn_hyper(d, p);
	}
}

static inline void dcqcn_on_cnp(struct dcqcn *d, const struct dcqcn_params *p, uint64_t now)
{
	d->rt = d->rc;
	d->bytes_left = p->byte_counter;
	d->b_stage = d->t_stage = 0;
	d->alpha = (1 - p->g) * d->alpha + p->g;
	d->rc *= 1 - d->alpha / 2;
	if (d->rc < p->min_bps)
		d->rc = p->min_bps;
	d->next_alpha_ns = now + p->alpha_ns;
	d->next_inc_ns = now + p->timer_ns;
	d->stage = DCQCN_FAST;
	d->cuts++;
}

/* the timers due at `now` */
static inline void dcqcn_on_time(struct dcqcn *d, const struct dcqcn_params *p, uint64_t now)
{
	while (now >= d->next_alpha_ns) {
		d->alpha = (1 - p->g) * d->alpha;
		d->next_alpha_ns += p->alpha_ns;
	}
	while (now >= d->next_inc_ns) {
		d->t_stage++;
		d->next_inc_ns += d->stage == DCQCN_HYPER ? p->timer_ns / 2 : p->timer_ns;
		dcqcn_event(d, p, d->t_stage);
	}
}

/* `bytes` more sent on the wire */
static inline void dcqcn_on_sent(struct dcqcn *d, const struct dcqcn_params *p,
				 uint64_t bytes)
{
	if (!p->byte_counter)
		return;
	while (bytes >= d->bytes_left) {
		bytes -= d->bytes_left;
		d->b_stage++;
		d->bytes_left = d->stage == DCQCN_HYPER ? p->byte_counter / 2 : p->byte_counter;
		dcqcn_event(d, p, d->b_stage);
	}
	d->bytes_left -= bytes;
}

static inline uint64_t dcqcn_next_ns(const struct dcqcn *d)
{
	return d->next_alpha_ns < d->next_inc_ns ? d->next_alpha_ns : d->next_inc_ns;
}

#endif

/* TIMELY (Mittal et al., SIGCOMM'15): the sender's rate from the gradient of the RTT, as
 * the paper's Algorithm 1 gives it, once per round trip as the HPCC code runs it
 * (alibaba-edu/High-Precision-Congestion-Control, rdma-hw.cc UpdateRateTimely: the first
 * ACK past the sequence sent at the last update; that code also takes the hyper-active
 * step below T_low and from the sixth increase, the paper's rule is kept here), from the
 * RTT of the packet that ACK acknowledges:
 *
 *   rtt_diff <- (1 - alpha) rtt_diff + alpha (rtt - prev_rtt);  gradient = rtt_diff / min_rtt
 *   rtt < T_low:          R <- R + delta
 *   rtt > T_high:         R <- R (1 - beta (1 - T_high / rtt))
 *   gradient <= 0:        R <- R + n delta, n = hai_n after hai_n such updates in a row
 *                         (hyper-active increase), else 1
 *   else:                 R <- R max(0, 1 - beta gradient)
 *   R within [min, line]. The first sample only records the RTT.
 *
 * Pure arithmetic on the state (the engine calls it and the unit tests run the very code);
 * the parameters arrive scaled to the emulated link (testbed/workloads/model/rdma.py). */
#ifndef TIMELY_H
#define TIMELY_H

#include <stdint.h>

struct timely_params {
	uint64_t t_low_ns, t_high_ns, min_rtt_ns;
	double alpha, beta, delta_bps, min_bps, line_bps;
	uint32_t hai_n;
};

struct timely {
	double rate, rtt_diff;
	uint64_t prev_rtt_ns;
	uint32_t in_a_row;           /* gradient <= 0 updates in a row */
	uint32_t next_update;        /* the first sequence an update waits for */
	int started;
	uint64_t updates, cuts;
};

static inline void timely_init(struct timely *t, const struct timely_params *p)
{
	t->rate = p->line_bps;
	t->rtt_diff = 0;
	t->prev_rtt_ns = 0;
	t->in_a_row = 0;
	t->next_update = 0;
	t->started = 0;
	t->updates = t->cuts = 0;
}

static inline void timely_clamp(struct timely *t, const struct timely_params *p)
{
	if (t->rate > p->line_bps)
		t->rate = p->line_bps;
	if (t->rate < p->min_bps)
		t->rate = p->min_bps;
}

/* an RTT sample, from the ACK of sequence `acked`, `snd_nxt` the next to send */
static inline void timely_on_rtt(struct timely *t, const struct timely_params *p,
				 uint64_t rtt_ns, uint32_t acked, uint32_t snd_nxt)
{
	double gradient;

	if (t->started && (int32_t)(acked - t->next_update) < 0)
		return;              /* once per round trip */
	t->next_update = snd_nxt;
	if (!t->started) {
		t->started = 1;
		t->prev_rtt_ns = rtt_ns;
		return;
	}
	t->rtt_diff = (1 - p->alpha) * t->rtt_diff +
		      p->alpha * ((double)rtt_ns - (double)t->prev_rtt_ns);
	t->prev_rtt_ns = rtt_ns;
	gradient = t->rtt_diff / (double)p->min_rtt_ns;
	t->updates++;
	if (rtt_ns < p->t_low_ns) {
		t->rate += p->delta_bps;
		t->in_a_row = 0;
	} else if (rtt_ns > p->t_high_ns) {
		t->rate *= 1 - p->beta * (1 - (double)p->t_high_ns / (double)rtt_ns);
		t->in_a_row = 0;
		t->cuts++;
	} else if (gradient <= 0) {
		t->in_a_row++;
		t->rate += (t->in_a_row >= p->hai_n ? p->hai_n : 1) * p->delta_bps;
	} else {
		double f = 1 - p->beta * gradient;

		t->rate *= f > 0 ? f : 0;
		t->in_a_row = 0;
		t->cuts++;
	}
	timely_clamp(t, p);
}

#endif

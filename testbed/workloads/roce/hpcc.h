/* HPCC (Li et al., SIGCOMM'19): the sender's window and rate from the switches' in-band
 * telemetry (int_wire.h), as the HPCC code computes them (alibaba-edu/
 * High-Precision-Congestion-Control, rdma-hw.cc HandleAckHp/UpdateRateHp, one rate for
 * the path). Every ACK echoes the records its packet collected; against the previous
 * ACK's, for each hop i:
 *
 *   tau_i = its time difference, txRate_i = its bytes difference * 8 / tau_i,
 *   u_i = txRate_i / B_i + min(qlen_i, its previous qlen_i) * 8 / (B_i T)
 *   u = the largest u_i, tau its hop's (at most T);  U <- (U (T - tau) + u tau) / T
 *   k = U / eta:  k >= 1 or stage >= max_stage:  R = Rc / k + R_AI, stage 0
 *                 else                           R = Rc + R_AI,     stage + 1
 *   R within [min, line]; the pacer takes R at once, and R becomes Rc (with the stage)
 *   once per round trip, on the first ACK past the sequence sent at the last commit;
 *   the window is R T (one BDP when R is the line rate).
 *
 * T is the base round trip, B_i the link's rate. Pure arithmetic on the state and the
 * records (the engine calls it and the unit tests run the very code). */
#ifndef HPCC_H
#define HPCC_H

#include <stdint.h>

#include "../../dataplane/bpf/int_wire.h"

#define HPCC_RATES 8

struct hpcc_params {
	double eta, rai_bps, min_bps, line_bps;
	uint32_t max_stage;
	uint64_t base_rtt_ns;                /* T */
	double rates_bps[HPCC_RATES];        /* the records' rate index -> b/s */
};

struct hpcc {
	double u, rc, rate;
	uint32_t stage, nhop;
	uint64_t prev[INT_MAX_HOPS];
	uint32_t next_update;
	int started;
	uint64_t updates, commits, cuts;   /* cuts: commits below the last */
};

static inline void hpcc_init(struct hpcc *h, const struct hpcc_params *p)
{
	h->u = 1;
	h->rc = h->rate = p->line_bps;
	h->stage = h->nhop = 0;
	h->next_update = 0;
	h->started = 0;
	h->updates = h->commits = h->cuts = 0;
}

static inline double hpcc_window_bytes(const struct hpcc *h, const struct hpcc_params *p)
{
	return h->rate * (double)p->base_rtt_ns / 8e9;
}

/* an ACK of sequence `acked` echoing `nhop` records; `snd_nxt` the next to send */
static inline void hpcc_on_ack(struct hpcc *h, const struct hpcc_params *p, uint32_t acked,
			       uint32_t snd_nxt, const uint64_t *hops, uint32_t nhop)
{
	double t_ns = (double)p->base_rtt_ns, umax = -1, tau = 0, k, r;
	uint32_t stage;

	if (nhop > INT_MAX_HOPS)
		return;
	if (!h->started || nhop != h->nhop) {     /* the first, or the path changed */
		h->started = 1;
		h->nhop = nhop;
		for (uint32_t i = 0; i < nhop; i++)
			h->prev[i] = hops[i];
		h->next_update = snd_nxt;
		return;
	}
	for (uint32_t i = 0; i < nhop; i++) {
		uint64_t dt = (uint64_t)((INT_HOP_TIME(hops[i]) - INT_HOP_TIME(h->prev[i])) &
					 INT_MASK(INT_TIME_BITS)) << INT_TIME_SHIFT;
		uint64_t db = (uint64_t)((INT_HOP_BYTES(hops[i]) - INT_HOP_BYTES(h->prev[i])) &
					 INT_MASK(INT_BYTES_BITS)) << INT_BYTES_SHIFT;
		uint32_t q = INT_HOP_QLEN(hops[i]) < INT_HOP_QLEN(h->prev[i]) ?
			INT_HOP_QLEN(hops[i]) : INT_HOP_QLEN(h->prev[i]);
		double b = p->rates_bps[INT_HOP_RATE(hops[i]) % HPCC_RATES], ui;

		h->prev[i] = hops[i];
		if (!dt || b <= 0)
			continue;
		ui = (double)db * 8e9 / (double)dt / b +
		     (double)q * INT_QLEN_UNIT * 8e9 / (b * t_ns);
		if (ui > umax) {
			umax = ui;
			tau = (double)dt;
		}
	}
	if (umax < 0)
		return;              /* no hop moved on: nothing new */
	if (tau > t_ns)
		tau = t_ns;
	h->u = (h->u * (t_ns - tau) + umax * tau) / t_ns;
	k = h->u / p->eta;
	if (k >= 1 || h->stage >= p->max_stage) {
		r = h->rc / k + p->rai_bps;
		stage = 0;
	} else {
		r = h->rc + p->rai_bps;
		stage = h->stage + 1;
	}
	if (r > p->line_bps)
		r = p->line_bps;
	if (r < p->min_bps)
		r = p->min_bps;
	h->rate = r;
	h->updates++;
	if ((int32_t)(acked - h->next_update) >= 0) {
		h->cuts += r < h->rc;
		h->rc = r;
		h->stage = stage;
		h->next_update = snd_nxt;
		h->commits++;
	}
}

#endif

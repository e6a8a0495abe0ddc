/* A worked example of a user's RDMA congestion control for the testbed's RoCE engine
 * (docs/RDMA.md, "Your own congestion control"): additive increase, multiplicative
 * decrease on congestion notifications, paced by rate.
 *
 *   every base round trip without a CNP:  R <- R + ai * line
 *   a CNP (at most one cut per base RTT): R <- R * md
 *   a loss (timeout or NAK):              R <- R * md, once per base RTT as well
 *   R within [min_share * line, line]
 *
 * The spec gives the parameters in order (`user_cc.params`): ai, md, min_share. They are
 * shares of the line rate and multiples of the round trip, so the same values mean the
 * same dynamics at any emulated rate: nothing to scale.
 *
 * The engine includes this file once, in C; everything here is `static inline` on the
 * state below. It must define struct user_cc (one per queue pair) with the two outputs
 * the engine reads, rate_bps and window_bytes, and the five hooks. */
#ifndef AIMD_CC_H
#define AIMD_CC_H

struct user_cc {
	double rate_bps;             /* output: the queue pair's pacing rate */
	double window_bytes;         /* output: the most in flight (0: no window) */
	uint64_t last_cut_ns, last_grow_ns;
	uint64_t cuts;
};

static inline void aimd_clamp(struct user_cc *s, const struct cc_env *e)
{
	double floor = e->params[2] * e->line_bps;

	if (s->rate_bps > e->line_bps)
		s->rate_bps = e->line_bps;
	if (s->rate_bps < floor)
		s->rate_bps = floor;
}

static inline void user_cc_init(struct user_cc *s, const struct cc_env *e)
{
	s->rate_bps = e->line_bps;   /* start at the line rate, as DCQCN does */
	s->window_bytes = 0;
	s->last_cut_ns = s->last_grow_ns = 0;
	s->cuts = 0;
}

static inline void aimd_cut(struct user_cc *s, const struct cc_env *e, uint64_t now_ns)
{
	if (s->last_cut_ns && now_ns - s->last_cut_ns < e->base_rtt_ns)
		return;              /* one cut per round trip */
	s->rate_bps *= e->params[1];
	s->last_cut_ns = s->last_grow_ns = now_ns;
	s->cuts++;
	aimd_clamp(s, e);
}

static inline void user_cc_on_cnp(struct user_cc *s, const struct cc_env *e, uint64_t now_ns)
{
	aimd_cut(s, e, now_ns);
}

static inline void user_cc_on_loss(struct user_cc *s, const struct cc_env *e, uint64_t now_ns)
{
	aimd_cut(s, e, now_ns);
}

static inline void user_cc_on_ack(struct user_cc *s, const struct cc_env *e,
				  const struct cc_ack *a)
{
	(void)s, (void)e, (void)a;   /* this one grows on time, not per ACK */
}

/* called on every pass of the engine's loop; returns when it wants the next call */
static inline uint64_t user_cc_on_time(struct user_cc *s, const struct cc_env *e,
				       uint64_t now_ns)
{
	if (!s->last_grow_ns)
		s->last_grow_ns = now_ns;
	if (now_ns - s->last_grow_ns >= e->base_rtt_ns) {
		s->rate_bps += e->params[0] * e->line_bps;
		s->last_grow_ns = now_ns;
		aimd_clamp(s, e);
	}
	return s->last_grow_ns + e->base_rtt_ns;
}

#endif

/* What the RoCE engine gives a user's congestion control (docs/RDMA.md, "Your own
 * congestion control"). The user's header, named by the spec's `user_cc.source`, is
 * compiled into the engine after this one and defines, all `static inline`:
 *
 *   struct user_cc { double rate_bps; double window_bytes; ... };   one per queue pair
 *   void user_cc_init(struct user_cc *, const struct cc_env *);
 *   void user_cc_on_ack(struct user_cc *, const struct cc_env *, const struct cc_ack *);
 *   void user_cc_on_cnp(struct user_cc *, const struct cc_env *, uint64_t now_ns);
 *   void user_cc_on_loss(struct user_cc *, const struct cc_env *, uint64_t now_ns);
 *   uint64_t user_cc_on_time(struct user_cc *, const struct cc_env *, uint64_t now_ns);
 *
 * The engine paces the queue pair at rate_bps (bits per second on the wire, held to the
 * line rate) and, when window_bytes > 0, keeps at most that many bytes in flight (with
 * "+w", the smaller of that and one BDP); it reads both after every hook, and a rate that
 * is not a positive number, or a negative window, ends the engine with a message naming
 * the hook. on_ack runs for every positive ACK of the requester (with the acknowledged
 * packet's round trip when it was sent once, and the echoed telemetry when the spec asks
 * for it), on_cnp for every CNP, on_loss for a retransmission timeout or a NAK, on_time
 * on every pass of the engine's loop: it returns when it next wants to run (0: no wish),
 * which may wake the loop early. Times are CLOCK_MONOTONIC nanoseconds. */
#ifndef USER_CC_API_H
#define USER_CC_API_H

#include <stdint.h>

#define USER_CC_PARAMS 8

struct cc_env {
	double line_bps;             /* the queue pair's line rate */
	uint64_t base_rtt_ns;        /* the fabric's base round trip, measured (HPCC's T) */
	uint32_t mtu;                /* payload bytes of a full packet */
	uint32_t wire_bytes;         /* a full packet on the wire, headers included */
	double params[USER_CC_PARAMS];   /* the spec's user_cc.params, in their order */
};

struct cc_ack {
	uint64_t now_ns;
	uint64_t rtt_ns;             /* the acknowledged packet's round trip; 0: none (resent) */
	uint32_t acked;              /* the sequence acknowledged (all before it arrived) */
	uint32_t snd_nxt;            /* the next sequence to send */
	uint32_t hops;               /* telemetry records echoed (0 without telemetry) */
	const uint64_t *records;     /* int_wire.h's per-hop records, hop by hop */
};

#endif

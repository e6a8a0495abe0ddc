// SPDX-License-Identifier: GPL-2.0
/* The testbed's RoCEv2 engine: one process per host that carries reliable-connected queue
 * pairs over UDP port 4791 in RoCEv2's packet format (roce_wire.h), as a RoCE NIC would:
 * messages (RDMA WRITEs) cut into MTU-sized packets, a per-QP rate limiter, cumulative
 * ACKs, a NAK (PSN sequence error) once per gap, go-back-N recovery from the NAK's PSN
 * or on a retransmission timeout, and CNPs from the receiver when data arrives CE-marked
 * (at most one per QP per interval). Or, with an irn line, IRN's recovery (Mittal et al.,
 * SIGCOMM'18): the receiver keeps what arrives out of order and answers each such packet
 * with a NAK naming it (a selective acknowledgement, after the AETH); the sender resends
 * only what is missing below the highest such packet, keeps at most a BDP of packets in
 * flight, and times out after RTO_LOW while N or fewer are in flight, else RTO_HIGH.
 *
 * Data leaves ECN-capable in the lossless class's DSCP, with a UDP checksum of zero
 * (RoCEv2 relies on its ICRC). A requester QP's rate, and for some schemes its window, is
 * its congestion control's: DCQCN from CNPs (dcqcn.h), DCQCN+ from CNPs whose period the
 * receiver stretches with the flows it sees congested (dcqcn_plus.h), TIMELY from round
 * trip times (timely.h), HPCC from the switches' telemetry that data packets collect and
 * ACKs echo (hpcc.h, int_wire.h), a UEC-like NSCC window from every ACK's echoed mark
 * and its packet's delay (nscc.h); without one, its line rate.
 *
 * Usage: tbroce CONFIG OUT.json. CONFIG is line-based (the Python side writes it,
 * testbed/workloads/roce/__init__.py):
 *   bind IP PORT | mtu BYTES | dscp N | ctrl_dscp N | ack_every PKTS | rto_us US
 *   cnp_interval_us US | sample_us US | linger_ms MS | end_after_ms MS | drop_every N
 *   ce_every N | dcqcn G ALPHA_NS TIMER_NS BYTE_COUNTER F RAI_BPS RHAI_BPS MIN_BPS
 *   timely T_LOW_NS T_HIGH_NS MIN_RTT_NS ALPHA BETA DELTA_BPS HAI_N MIN_BPS
 *   hpcc ETA MAX_STAGE RAI_BPS MIN_BPS BASE_RTT_NS
 *   nscc FI ETA ALPHA FI_SCALE GAMMA MD_FLOOR DELAY_ALPHA FAST QA_DELAY QA_GATE MAXWND
 *        TARGET FULFIL_PKTS BASE_RTT_NS   (FI, ETA, ALPHA, MAXWND: shares of the BDP;
 *                                      FAST, TARGET: of T; QA_DELAY: targets; nscc.h)
 *   dcqcn_plus G MIN_TAU_NS F MIN_BPS SCAN_NS MIN_INTERVAL_NS ENTRY_TIMEOUT_NS
 *   int_rates MBPS...                 (data carries telemetry room; the records' rate table)
 *   window_bytes N                    (at most N bytes in flight per QP: the "+w" variants)
 *   irn RTO_LOW_US RTO_HIGH_US N BDP_PKTS   (IRN's recovery, on both ends)
 *   spray ENTROPIES REORDER_PKTS      (packet spraying, with irn: each data packet from one of
 *                                      the QP's ENTROPIES source ports in turn; IRN takes a
 *                                      hole as lost once a packet REORDER_PKTS beyond it is
 *                                      acknowledged; below irn's BDP_PKTS)
 *   user BASE_RTT_NS [P1 .. P8]       (a user's control, compiled in with -DUSER_CC_H:
 *                                      user_cc_api.h; its parameters, the spec's units)
 *   start_at_unix SECONDS             (wait until then: engines on many hosts start together)
 *   exit_when_done 0|1                (0: print "done" when every WRITE is acknowledged and
 *                                      run on, a responder for others, until told)
 *   qp QPN PEER_IP PEER_PORT PEER_QPN LINE_MBPS [SOURCE_PORT [DSCP]]
 *   msg QPN START_US BYTES            (a WRITE of BYTES, posted START_US after start;
 *                                      after the mtu line and its qp line, a QP's in order)
 *   control 1                         (no msg lines, exit_when_done 0: WRITEs come on
 *                                      stdin as they are needed, `post QPN BYTES`, until
 *                                      `end` or the end of stdin; stdout tells each message
 *                                      acknowledged, `sent QPN N`, and each one arrived
 *                                      whole, `recv QPN N`, N counting the QP's messages:
 *                                      collectives run over the engine this way)
 * The engine ends when every message is acknowledged (and LINGER_MS has passed for the
 * peer's last ACKs), at END_AFTER_MS, or on SIGTERM/SIGINT, and writes its counters, every
 * message's start and completion, and each QP's rate every SAMPLE_US to OUT.json.
 * drop_every, ce_every (tests only): the receiver discards, or takes as CE-marked, every
 * Nth data packet it gets. A dcqcn, dcqcn_plus, timely, hpcc, nscc or user line sets every
 * requester QP's congestion control, with parameters already scaled to the link (a
 * user's: as the user wrote them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <linux/filter.h>
#include <time.h>
#include <unistd.h>

#include "roce_wire.h"
#include "dcqcn.h"
#include "dcqcn_plus.h"
#include "user_cc_api.h"
#ifdef USER_CC_H
#include USER_CC_H
#endif
#include "hpcc.h"
#include "timely.h"
#include "nscc.h"

#define MAX_QPS 4096
#define MAX_PKT 9216
/* what a packet costs on the link besides its payload: Ethernet 14, IPv4 20, UDP 8,
 * BTH 12, ICRC 4 (the rate limiter paces in these bytes) */
#define WIRE_OVERHEAD (14 + 20 + 8 + ROCE_BTH_LEN + ROCE_ICRC_LEN)
#define BURST_PKTS 2
#define RTT_RING 4096            /* send times kept per requester QP, by sequence */
#define IRN_WIN 4096             /* IRN: sequences a QP tracks beyond its oldest unacked */
#define NO_SAMPLE UINT32_MAX

enum { CC_LINE, CC_DCQCN, CC_TIMELY, CC_HPCC, CC_DCQCNP, CC_USER, CC_NSCC };

struct msg {
	uint32_t qpn;
	uint64_t start_ns;           /* posted */
	uint64_t bytes;
	uint32_t first;              /* its first packet's sequence (32-bit, unwrapped) */
	uint32_t npkts;
	uint64_t end_ns;             /* its last packet acknowledged; 0 until then */
};

struct sample {
	uint32_t qpn;
	uint64_t t_ns;
	double rate_mbps;            /* the limiter's rate */
	double tx_mbps;              /* what it sent in the interval, on the wire */
};

struct qp {
	uint32_t qpn, peer_qpn;
	struct sockaddr_in peer;
	uint16_t sport;              /* UDP source port it sends from (0: the bound port) */
	double line_bps, rate_bps;
	/* requester */
	uint32_t snd_una, snd_nxt, snd_end, high;  /* high: one past the highest ever sent */
	uint64_t next_tx_ns, progress_ns;
	int paced;                   /* it had a packet ready at the last pass: its pace alone
				      * held it, so the engine owed it a wake-up at next_tx_ns */
	uint64_t late_ns;            /* pacing time lost to the engine waking late */
	uint64_t late_cpu_ns;        /* the part of it the engine ran or waited for a core */
	struct msg *m;               /* its messages, in sequence order */
	int nm, cap_m;
	int posted;                  /* how many of them are posted */
	int done_m;                  /* how many of them are acknowledged */
	int requester;               /* it sends (a msg line, or control mode) */
	int dscp;                    /* its data's DSCP */
	/* responder */
	uint32_t epsn, msn, since_ack;
	int nak_sent, seen;
	uint64_t last_cnp_ns;
	/* counters */
	uint64_t tx_pkts, tx_bytes, retx_pkts, rx_pkts, rx_bytes, ooo_drops, dup_pkts;
	uint64_t acks_tx, acks_rx, naks_tx, naks_rx, cnps_tx, cnps_rx, ce_rx, timeouts;
	uint64_t test_drops, tx_wire_interval;
	uint64_t becn_rx;            /* ACKs that echoed a mark (NSCC) */
	uint64_t rtt_samples, rtt_sum_ns, rtt_min_ns, rtt_max_ns;
	uint32_t int_hops;           /* the hops the last echoed telemetry had records of */
	/* its congestion control, with the parameters at its line rate */
	struct dcqcn dc;
	struct dcqcn_params dp;
	struct timely tm;
	struct timely_params tp;
	struct hpcc hp;
	struct hpcc_params hpar;
	struct dcqcnp dq;
	struct dcqcnp_params dqp;
	struct nscc ns;
	struct nscc_params nsp;
#ifdef USER_CC_H
	struct user_cc uc;
#endif
	struct cc_env ue;            /* what the user's control is given */
	/* DCQCN+'s notification point: a mark waits for this QP's turn in the scan */
	int np_pending, np_listed;
	uint64_t last_ce_ns;
	uint32_t *ring_psn;          /* a requester's send times: the sequence in each slot */
	uint64_t *ring_ns;
	/* IRN: the requester's selectively acknowledged sequences and recovery; the
	 * responder's packets kept beyond epsn (and which of them end a message) */
	uint8_t *sacked, *kept, *kept_last;
	uint32_t sack_high, rtx_ptr, recovery_end, lost_high;
	int in_recovery;
	uint64_t ooo_kept, sacks_rx;
	/* responder: one past the highest PSN received; packets that came after a higher one,
	 * and by how many PSNs at most (the reordering a sprayed QP sees) */
	uint32_t rx_high;
	uint64_t reordered, reorder_max;
};

static struct qp qps[MAX_QPS];
static int nqps;
static int nmsgs;                     /* every QP's messages */
static struct sample *samples;
static size_t nsamples, cap_samples;

static struct sockaddr_in bind_addr;
static uint32_t mtu = 1024, ack_every = 1, drop_every, ce_every;
static int cc = CC_LINE;
static struct dcqcn_params dcp;
static struct timely_params tlp;
static struct hpcc_params hpp;
/* NSCC's constants as shares of the BDP and T, and T itself (its "nscc" line) */
static double ns_fi_bdp, ns_eta_bdp, ns_alpha_bdp, ns_fi_scale, ns_gamma, ns_md_floor,
	      ns_delay_alpha, ns_fast_rtt, ns_qa_targets, ns_maxwnd_bdp, ns_target_rtt,
	      ns_fulfil_pkts;
static uint32_t ns_qa_gate;
static uint64_t ns_base_rtt_ns;
static int ack_ce;                    /* the data packet an ACK answers was CE-marked */
static struct dcqcnp_params dqp;
static struct cc_env user_env;       /* a user's control: the base RTT and parameters */
static uint64_t np_scan_ns, np_min_interval_ns, np_timeout_ns;
static int np_list[MAX_QPS], np_n, np_at;   /* QPs with marks, visited round-robin */
static uint64_t np_next_ns;
static int use_int;                  /* data packets carry room for telemetry */
static uint64_t window_bytes;        /* a fixed window per QP; 0: none */
static int use_irn;
static uint32_t spray_evs, spray_reorder;   /* packet spraying (spray line); 0: off */
static uint64_t irn_rto_low_ns, irn_rto_high_ns;
static uint32_t irn_n, irn_bdp_pkts;
static int dscp = 26, ctrl_dscp = 48;
static uint64_t rto_ns = 4000000, cnp_interval_ns = 50000, sample_ns = 1000000;
static uint64_t linger_ns = 200000000, end_after_ns;
static double start_at_unix;
static int exit_when_done = 1;       /* 0: run until told, saying "done" when done */
static int control;                  /* WRITEs posted on stdin, completions told on stdout */
static uint64_t eagain;
static int tx_blocked;               /* the host's queue refused a send: wait for POLLOUT */
/* a raw UDP socket that sends every packet when a QP has a source port of its own (a
 * RoCE NIC's per-QP entropy); -1: the bound socket sends them all */
static int raw_fd = -1;
static uint64_t unblocked_ns;        /* when it last took sends again */
/* A pass that began after some QP's pace was lost looks at the host's queue once: if it
 * still held the engine's packets, the host's link never waited for the late engine (a
 * NIC drains its queue while the CPU is away), so the lateness cost no pace */
static uint64_t lose_from = UINT64_MAX;  /* the previous pass's earliest late_from() */
static int backlog_held;
/* How much of a late wake-up the engine spent running or waiting for a core (runnable,
 * not running) since it last went to sleep: /proc/thread-self/schedstat's first two
 * fields, read before every sleep and once in a pass that sends late. The rest of it, the
 * engine slept past its timer (docs/FIDELITY.md). Unknown (no schedstat, or a kernel that
 * keeps none): all of it. */
static int schedstat_fd = -1;
static uint64_t cpu_mark;             /* the engine's run plus wait before its last sleep */
static uint64_t pass_cpu;             /* this pass's reading; 0: not read yet */
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "tbroce: %s\n", what);
	exit(2);
}

/* a system call failed: say which error */
static void die_errno(const char *what)
{
	fprintf(stderr, "tbroce: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct qp *qp_by_qpn(uint32_t qpn)
{
	for (int i = 0; i < nqps; i++)
		if (qps[i].qpn == qpn)
			return &qps[i];
	return NULL;
}

/* a WRITE of `bytes` on q, posted `start_ns` after the engine's start, after q's others */
static void add_msg(struct qp *q, uint64_t start_ns, uint64_t bytes)
{
	struct msg *m;

	if (q->nm == q->cap_m) {
		q->cap_m = q->cap_m ? 2 * q->cap_m : 16;
		q->m = realloc(q->m, (size_t)q->cap_m * sizeof(*q->m));
		if (!q->m)
			die("out of memory");
	}
	m = &q->m[q->nm];
	memset(m, 0, sizeof(*m));
	m->qpn = q->qpn;
	m->start_ns = start_ns;
	m->bytes = bytes;
	m->npkts = (uint32_t)((bytes + mtu - 1) / mtu);
	m->first = q->nm ? q->m[q->nm - 1].first + q->m[q->nm - 1].npkts : 0;
	q->nm++;
	q->requester = 1;
	nmsgs++;
}

static void read_config(const char *path)
{
	char line[512], key[32], ip[64];
	FILE *f = fopen(path, "r");
	unsigned long long a, b, c;
	unsigned qpn, peer_qpn, port, sport;
	int n;
	double mbps;

	if (!f)
		die("cannot open the config");
	bind_addr.sin_family = AF_INET;
	bind_addr.sin_port = htons(ROCE_UDP_PORT);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%31s", key) != 1 || key[0] == '#')
			continue;
		if (!strcmp(key, "bind")) {
			if (sscanf(line, "%*s %63s %u", ip, &port) != 2 ||
			    inet_pton(AF_INET, ip, &bind_addr.sin_addr) != 1)
				die("bad bind line");
			bind_addr.sin_port = htons((uint16_t)port);
		} else if (!strcmp(key, "qp")) {
			struct qp *q;

			if (nqps == MAX_QPS)
				die("too many queue pairs");
			q = &qps[nqps++];
			sport = 0;
			q->dscp = -1;
			n = sscanf(line, "%*s %u %63s %u %u %lf %u %d", &qpn, ip, &port, &peer_qpn,
				   &mbps, &sport, &q->dscp);
			if (n < 5 || mbps <= 0 || sport > 65535 || q->dscp < -1 || q->dscp > 63)
				die("bad qp line");
			q->sport = (uint16_t)sport;
			q->qpn = qpn;
			q->peer_qpn = peer_qpn;
			q->peer.sin_family = AF_INET;
			q->peer.sin_port = htons((uint16_t)port);
			if (inet_pton(AF_INET, ip, &q->peer.sin_addr) != 1)
				die("bad qp peer address");
			q->line_bps = q->rate_bps = mbps * 1e6;
		} else if (!strcmp(key, "dcqcn")) {
			unsigned long long an, tn, bc;

			if (sscanf(line, "%*s %lf %llu %llu %llu %u %lf %lf %lf", &dcp.g, &an, &tn,
				   &bc, &dcp.f, &dcp.rai_bps, &dcp.rhai_bps, &dcp.min_bps) != 8 ||
			    dcp.g <= 0 || dcp.g > 1 || !an || !tn)
				die("bad dcqcn line");
			dcp.alpha_ns = an;
			dcp.timer_ns = tn;
			dcp.byte_counter = bc;
			cc = CC_DCQCN;
		} else if (!strcmp(key, "timely")) {
			if (sscanf(line, "%*s %" SCNu64 " %" SCNu64 " %" SCNu64 " %lf %lf %lf %u %lf",
				   &tlp.t_low_ns,
				   &tlp.t_high_ns, &tlp.min_rtt_ns, &tlp.alpha, &tlp.beta,
				   &tlp.delta_bps, &tlp.hai_n, &tlp.min_bps) != 8 || !tlp.min_rtt_ns ||
			    tlp.alpha <= 0 || tlp.alpha > 1 || tlp.beta <= 0 || tlp.beta > 1 ||
			    tlp.t_low_ns >= tlp.t_high_ns || !tlp.hai_n)
				die("bad timely line");
			cc = CC_TIMELY;
		} else if (!strcmp(key, "hpcc")) {
			if (sscanf(line, "%*s %lf %u %lf %lf %" SCNu64, &hpp.eta, &hpp.max_stage,
				   &hpp.rai_bps, &hpp.min_bps, &hpp.base_rtt_ns) != 5 ||
			    hpp.eta <= 0 || hpp.eta > 1 || !hpp.base_rtt_ns)
				die("bad hpcc line");
			cc = CC_HPCC;
		} else if (!strcmp(key, "nscc")) {
			if (sscanf(line, "%*s %lf %lf %lf %lf %lf %lf %lf %lf %lf %u %lf %lf %lf %"
				   SCNu64, &ns_fi_bdp, &ns_eta_bdp, &ns_alpha_bdp, &ns_fi_scale,
				   &ns_gamma, &ns_md_floor, &ns_delay_alpha, &ns_fast_rtt,
				   &ns_qa_targets, &ns_qa_gate, &ns_maxwnd_bdp, &ns_target_rtt,
				   &ns_fulfil_pkts, &ns_base_rtt_ns) != 14 || !ns_base_rtt_ns ||
			    ns_gamma <= 0 || ns_gamma > 1 || ns_md_floor <= 0 || ns_md_floor > 1 ||
			    ns_delay_alpha <= 0 || ns_delay_alpha > 1 || ns_maxwnd_bdp <= 0 ||
			    ns_target_rtt <= 0 || ns_qa_gate > 16)
				die("bad nscc line");
			cc = CC_NSCC;
		} else if (!strcmp(key, "dcqcn_plus")) {
			if (sscanf(line, "%*s %lf %" SCNu64 " %u %lf %" SCNu64 " %" SCNu64 " %" SCNu64,
				   &dqp.g, &dqp.min_tau_ns,
				   &dqp.f, &dqp.min_bps, &np_scan_ns, &np_min_interval_ns,
				   &np_timeout_ns) != 7 || dqp.g <= 0 || dqp.g > 1 || !dqp.min_tau_ns ||
			    !np_scan_ns || !np_timeout_ns)
				die("bad dcqcn_plus line");
			cc = CC_DCQCNP;
		} else if (!strcmp(key, "user")) {
			double *p = user_env.params;
			int n = sscanf(line, "%*s %" SCNu64 " %lf %lf %lf %lf %lf %lf %lf %lf",
				       &user_env.base_rtt_ns, p, p + 1, p + 2, p + 3, p + 4, p + 5,
				       p + 6, p + 7);

			if (n < 1 || !user_env.base_rtt_ns)
				die("bad user line");
#ifndef USER_CC_H
			die("this engine was built without a user congestion control");
#endif
			cc = CC_USER;
		} else if (!strcmp(key, "irn")) {
			unsigned long long lo, hi;

			if (sscanf(line, "%*s %llu %llu %u %u", &lo, &hi, &irn_n, &irn_bdp_pkts) != 4 ||
			    !lo || lo > hi || !irn_bdp_pkts || irn_bdp_pkts >= IRN_WIN)
				die("bad irn line");
			irn_rto_low_ns = lo * 1000;
			irn_rto_high_ns = hi * 1000;
			use_irn = 1;
		} else if (!strcmp(key, "spray")) {
			if (sscanf(line, "%*s %u %u", &spray_evs, &spray_reorder) != 2 || !spray_evs ||
			    spray_evs > 256 || spray_reorder >= IRN_WIN)
				die("bad spray line");
		} else if (!strcmp(key, "int_rates")) {
			char *rest = line + strlen("int_rates");
			int n = 0, used;
			double r;

			while (sscanf(rest, "%lf%n", &r, &used) == 1 && r > 0) {
				if (n == HPCC_RATES)
					die("more than 8 int_rates");
				hpp.rates_bps[n++] = r * 1e6;
				rest += used;
			}
			if (!n)
				die("bad int_rates line");
			use_int = 1;
		} else if (!strcmp(key, "start_at_unix")) {
			if (sscanf(line, "%*s %lf", &start_at_unix) != 1)
				die("bad start_at_unix line");
		} else if (!strcmp(key, "msg")) {
			struct qp *q;

			if (sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) != 3 || c == 0)
				die("bad msg line");
			q = qp_by_qpn((uint32_t)a);
			if (!q)
				die("msg for an unknown qp");
			add_msg(q, b * 1000ull, c);
		} else if (sscanf(line, "%*s %llu", &a) == 1) {
			if (!strcmp(key, "mtu"))
				mtu = (uint32_t)a;
			else if (!strcmp(key, "dscp"))
				dscp = (int)a;
			else if (!strcmp(key, "ctrl_dscp"))
				ctrl_dscp = (int)a;
			else if (!strcmp(key, "ack_every"))
				ack_every = (uint32_t)a;
			else if (!strcmp(key, "rto_us"))
				rto_ns = a * 1000ull;
			else if (!strcmp(key, "cnp_interval_us"))
				cnp_interval_ns = a * 1000ull;
			else if (!strcmp(key, "sample_us"))
				sample_ns = a * 1000ull;
			else if (!strcmp(key, "linger_ms"))
				linger_ns = a * 1000000ull;
			else if (!strcmp(key, "end_after_ms"))
				end_after_ns = a * 1000000ull;
			else if (!strcmp(key, "drop_every"))
				drop_every = (uint32_t)a;
			else if (!strcmp(key, "ce_every"))
				ce_every = (uint32_t)a;
			else if (!strcmp(key, "exit_when_done"))
				exit_when_done = (int)a;
			else if (!strcmp(key, "control"))
				control = (int)a;
			else if (!strcmp(key, "window_bytes"))
				window_bytes = a;
			else
				die("unknown config key");
		} else {
			die("bad config line");
		}
	}
	fclose(f);
	if (spray_evs && (!use_irn || spray_reorder >= irn_bdp_pkts))
		die("spray needs irn, and REORDER_PKTS below its BDP_PKTS");
	if (mtu < 256 || mtu + ROCE_BTH_LEN + ROCE_ICRC_LEN > MAX_PKT || !ack_every ||
	    dscp > 63 || ctrl_dscp > 63 || !sample_ns)
		die("config out of range");
	if (cc == CC_HPCC && !use_int)
		die("hpcc needs an int_rates line");
	if (control && (nmsgs || exit_when_done))
		die("control mode takes its WRITEs on stdin, and runs until told");
	for (int i = 0; i < nqps; i++) {
		qps[i].requester |= control;
		if (qps[i].dscp < 0)
			qps[i].dscp = dscp;
	}
}

/* the message a sequence number belongs to (its QP's messages are in sequence order) */
static struct msg *msg_of(const struct qp *q, uint32_t seq)
{
	int lo = 0, hi = q->nm - 1;

	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;

		if ((int32_t)(seq - q->m[mid].first) >= 0)
			lo = mid;
		else
			hi = mid - 1;
	}
	return &q->m[lo];
}

/* The source port of data packet `seq` of q: a sprayed QP's entropy values in turn, spread
 * over 0xC000..0xFFFF from its own port (UEC's packet spraying); else its port. */
static uint16_t data_sport(const struct qp *q, uint32_t seq)
{
	if (!spray_evs || !q->sport)
		return q->sport;
	return (uint16_t)(0xC000 | ((q->sport + (seq % spray_evs) * 1031u) & 0x3FFF));
}

/* `sport`: the UDP source port (0: the QP's) */
static int send_pkt(int fd, const struct qp *q, const uint8_t *buf, size_t len, int data,
		    uint16_t sport)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	/* through the raw socket, the UDP header is ours: the QP's source port, no checksum */
	if (!sport)
		sport = q->sport ? q->sport : ntohs(bind_addr.sin_port);
	uint16_t udp[4] = { htons(sport),
			    q->peer.sin_port, htons((uint16_t)(len + sizeof(udp))), 0 };
	struct iovec iov[2] = { { .iov_base = udp, .iov_len = sizeof(udp) },
				{ .iov_base = (void *)buf, .iov_len = len } };
	int raw = raw_fd >= 0;
	struct msghdr mh = {
		.msg_name = (void *)&q->peer, .msg_namelen = sizeof(q->peer),
		.msg_iov = raw ? iov : iov + 1, .msg_iovlen = raw ? 2 : 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	/* data ECN-capable (ECT(0)) in the lossless class; ACKs, NAKs and CNPs not */
	int tos = data ? (q->dscp << 2) | 0x2 : ctrl_dscp << 2;

	cm->cmsg_level = IPPROTO_IP;
	cm->cmsg_type = IP_TOS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &tos, sizeof(int));
	if (sendmsg(raw ? raw_fd : fd, &mh, MSG_DONTWAIT) < 0) {
		/* a raw socket says a full send buffer with ENOBUFS */
		if (errno == EAGAIN || errno == EWOULDBLOCK || (raw && errno == ENOBUFS)) {
			eagain++;
			tx_blocked = 1;
			return -1;
		}
		if (!data)
			return -1;
		die_errno("sendmsg failed");
	}
	return 0;
}

static int bit(const uint8_t *map, uint32_t seq)
{
	return map[seq % IRN_WIN / 8] >> (seq % 8) & 1;
}

static void set_bit(uint8_t *map, uint32_t seq, int v)
{
	if (v)
		map[seq % IRN_WIN / 8] |= (uint8_t)(1 << (seq % 8));
	else
		map[seq % IRN_WIN / 8] &= (uint8_t)~(1 << (seq % 8));
}

/* an ACK, NAK or CNP; 0 if it went (the host's queue may refuse it, as it may data).
 * An ACK or NAK echoes `echo`, the telemetry of the data packet it answers (NULL: none);
 * with IRN, every NAK names the packet that caused it, `sack`, after the AETH. */
static int send_ctrl_sack(int fd, struct qp *q, uint8_t opcode, uint8_t syndrome,
			  uint32_t psn, const uint8_t *echo, uint32_t sack)
{
	uint8_t buf[ROCE_BTH_LEN + ROCE_AETH_LEN + 4 + INT_LEN + ROCE_ICRC_LEN] = { 0 };
	struct bth h = { .opcode = opcode, .dest_qp = q->peer_qpn, .psn = psn,
			 .becn = opcode == OP_CNP || (opcode == OP_ACK && ack_ce),
			 .intf = echo && opcode != OP_CNP };
	size_t len;

	if (opcode == OP_CNP) {
		h.psn = 0;
		bth_put(buf, &h);
		if (cc == CC_DCQCNP) {       /* DCQCN+: tau in us, in the first reserved bytes */
			buf[ROCE_BTH_LEN] = (uint8_t)(sack >> 24);
			put_be24(buf + ROCE_BTH_LEN + 1, sack & 0xffffff);
		}
		len = ROCE_BTH_LEN + ROCE_CNP_PAD + ROCE_ICRC_LEN;
	} else {
		bth_put(buf, &h);
		aeth_put(buf + ROCE_BTH_LEN, syndrome, q->msn);
		len = ROCE_BTH_LEN + ROCE_AETH_LEN;
		if (use_irn && (syndrome & 0xe0) == AETH_NAK_PSN_SEQ) {
			put_be24(buf + len + 1, sack & ROCE_PSN_MASK);
			len += 4;
		}
		if (h.intf) {
			memcpy(buf + len, echo, INT_LEN);
			len += INT_LEN;
		}
		len += ROCE_ICRC_LEN;
	}
	return send_pkt(fd, q, buf, len, 0, 0);
}

static int send_ctrl(int fd, struct qp *q, uint8_t opcode, uint8_t syndrome, uint32_t psn,
		     const uint8_t *echo)
{
	return send_ctrl_sack(fd, q, opcode, syndrome, psn, echo, 0);
}

/* the bytes a data packet of `payload` bytes puts on the wire */
static uint32_t wire_len(uint32_t payload)
{
	return payload + WIRE_OVERHEAD + (use_int ? INT_LEN : 0);
}

/* the most q may have in flight, in bytes (0: no window) */
static double window_of(const struct qp *q)
{
	if (cc == CC_HPCC)
		return hpcc_window_bytes(&q->hp, &q->hpar);
	if (cc == CC_NSCC)
		return q->ns.cwnd;
#ifdef USER_CC_H
	if (cc == CC_USER && q->uc.window_bytes > 0)   /* with "+w": the smaller of the two */
		return window_bytes && (double)window_bytes < q->uc.window_bytes ?
		       (double)window_bytes : q->uc.window_bytes;
#endif
	return (double)window_bytes;
}

/* q's window, when it has one, has room for another packet (always for one) */
static int window_open(const struct qp *q)
{
	double w = window_of(q);
	uint32_t out = q->snd_nxt - q->snd_una;

	if (cc == CC_NSCC)           /* as the model: the next packet too within the window */
		return !out || (double)(out + 1) * wire_len(mtu) <= w;
	return w <= 0 || !out || (double)out * wire_len(mtu) < w;
}

/* The sequence q sends next, or -1 when it has nothing it may send. Go-back-N: snd_nxt.
 * IRN: in recovery, the oldest not selectively acknowledged below the highest that was
 * (or, after a timeout, below what had been sent); else new data, a BDP at most in flight. */
static int64_t next_seq(struct qp *q)
{
	if (!use_irn)
		return q->snd_nxt != q->snd_end && window_open(q) ? (int64_t)q->snd_nxt : -1;
	if (q->in_recovery) {
		/* sprayed: a hole counts as lost once a packet spray_reorder beyond it is
		 * acknowledged; nearer the newest, it may only be on a slower path */
		uint32_t sacked = q->sack_high - spray_reorder;
		uint32_t end = (int32_t)(sacked - q->lost_high) > 0 ? sacked : q->lost_high;

		if ((int32_t)(q->rtx_ptr - q->snd_una) < 0)
			q->rtx_ptr = q->snd_una;
		while ((int32_t)(end - q->rtx_ptr) > 0 && bit(q->sacked, q->rtx_ptr))
			q->rtx_ptr++;
		if ((int32_t)(end - q->rtx_ptr) > 0)
			return q->rtx_ptr;
	}
	/* IRN's BDP-FC caps what is in flight; NSCC's window does that itself (UET has no
	 * BDP-FC), below IRN's bitmaps' span */
	if (q->high != q->snd_end && q->high - q->snd_una < (cc == CC_NSCC ? IRN_WIN - 1 :
							      irn_bdp_pkts) && window_open(q))
		return q->high;
	return -1;
}

static uint32_t payload_of(const struct qp *q, uint32_t seq)
{
	const struct msg *m = msg_of(q, seq);
	uint32_t i = seq - m->first;

	return i + 1 == m->npkts ? (uint32_t)(m->bytes - (uint64_t)i * mtu) : mtu;
}

/* the time a packet of `payload` bytes takes on the wire at the QP's rate: its pace */
static uint64_t pace_gap(const struct qp *q, uint32_t payload)
{
	return (uint64_t)(wire_len(payload) * 8e9 / q->rate_bps);
}

/* The engine's time on a core plus its time runnable waiting for one, in ns; 0: unknown
 * (no schedstat, or a kernel that keeps none and reads all zeros). */
static uint64_t cpu_time_ns(void)
{
	char buf[128];
	unsigned long long run, wait;
	ssize_t n = schedstat_fd < 0 ? -1 : pread(schedstat_fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = 0;
	return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? run + wait : 0;
}

/* How much of a late wake-up of `lost` ns the engine spent running or waiting for a core
 * since it last went to sleep (all of it when that is unknown). */
static uint64_t lost_to_cpu(uint64_t lost)
{
	if (!pass_cpu)
		pass_cpu = cpu_time_ns();
	if (!pass_cpu || !cpu_mark)
		return lost;
	return pass_cpu - cpu_mark < lost ? pass_cpu - cpu_mark : lost;
}

/* when a late wake-up starts to cost the QP its pace: past its burst credit */
static uint64_t late_from(const struct qp *q, uint32_t seq)
{
	return q->next_tx_ns + BURST_PKTS * pace_gap(q, payload_of(q, seq));
}

/* one data packet of q, sequence `seq`; 0 if sent */
static int send_data(int fd, struct qp *q, uint32_t seq, uint64_t now)
{
	static uint8_t buf[MAX_PKT];
	struct msg *m = msg_of(q, seq);
	uint32_t i = seq - m->first;
	uint32_t payload = payload_of(q, seq);
	struct bth h = { .opcode = write_opcode(i, m->npkts), .dest_qp = q->peer_qpn,
			 .psn = seq, .ackreq = i + 1 == m->npkts, .intf = use_int };
	size_t len = ROCE_BTH_LEN + (use_int ? INT_LEN : 0) + payload + ROCE_ICRC_LEN;
	int retx = (int32_t)(seq - q->high) < 0;
	uint64_t gap;

	bth_put(buf, &h);
	if (use_int)
		memset(buf + ROCE_BTH_LEN, 0, INT_LEN);      /* no hop filled yet */
	/* a resend sprayed onto another path than the packet it replaces */
	if (send_pkt(fd, q, buf, len, 1,
		     data_sport(q, retx ? seq + 1 + (uint32_t)q->retx_pkts : seq)) < 0)
		return -1;
	q->tx_pkts++;
	q->tx_bytes += payload;
	q->tx_wire_interval += wire_len(payload);
	if (cc == CC_DCQCN) {
		dcqcn_on_sent(&q->dc, &q->dp, wire_len(payload));
		q->rate_bps = q->dc.rc;
	}
	if (q->ring_psn) {       /* a resent packet's ACK is no RTT sample (Karn) */
		q->ring_psn[seq % RTT_RING] = retx ? NO_SAMPLE : seq;
		q->ring_ns[seq % RTT_RING] = now;
	}
	if (retx)
		q->retx_pkts++;
	if (use_irn) {
		if (retx)
			q->rtx_ptr = seq + 1;
		else
			q->snd_nxt = q->high = seq + 1;
		q->progress_ns = now;        /* IRN's timer restarts with every send */
	} else {
		q->snd_nxt = seq + 1;
		if ((int32_t)(q->snd_nxt - q->high) > 0)
			q->high = q->snd_nxt;
	}
	/* a late wake-up may catch up by at most BURST_PKTS packets: the limiter banks no
	 * more credit than that while the loop was late or the QP idle */
	gap = pace_gap(q, payload);
	if (q->next_tx_ns + BURST_PKTS * gap < now) {
		/* it was due, and the engine (the machine) was late: from when it was due or
		 * the host's queue took sends again, whichever came last */
		uint64_t due = q->next_tx_ns > unblocked_ns ? q->next_tx_ns : unblocked_ns;

		if (q->paced && due + BURST_PKTS * gap < now && !backlog_held) {
			uint64_t lost = now - BURST_PKTS * gap - due;

			q->late_ns += lost;
			q->late_cpu_ns += lost_to_cpu(lost);
		}
		q->next_tx_ns = now - BURST_PKTS * gap;
	}
	q->next_tx_ns += gap;
	return 0;
}

static void ack_progress(struct qp *q, uint32_t upto, uint64_t now)
{
	if ((int32_t)(upto - q->snd_una) <= 0)
		return;
	if (q->sacked)
		for (uint32_t s = q->snd_una; s != upto; s++)
			set_bit(q->sacked, s, 0);
	q->snd_una = upto;
	if (q->in_recovery && (int32_t)(q->snd_una - q->recovery_end) >= 0) {
		q->in_recovery = 0;
		q->sack_high = q->snd_una;   /* what the next recovery resends starts afresh */
	}
	q->progress_ns = now;
	if ((int32_t)(q->snd_nxt - q->snd_una) < 0)
		q->snd_nxt = q->snd_una;
	while (q->done_m < q->posted &&
	       (int32_t)(q->snd_una - (q->m[q->done_m].first + q->m[q->done_m].npkts)) >= 0) {
		q->m[q->done_m++].end_ns = now;
		if (control)
			printf("sent %u %d\n", q->qpn, q->done_m);
	}
}

static uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

#ifdef USER_CC_H
/* what a user's control set after one of its hooks: a pacing rate that is a positive
 * number (no more than the line) and a window that is not negative */
static void user_take(struct qp *q, const char *hook)
{
	double r = q->uc.rate_bps, w = q->uc.window_bytes;

	if (!(r > 0) || r != r || r > 1e15 || !(w >= 0) || w > 1e15) {
		fprintf(stderr, "user_cc: after %s, rate_bps %g and window_bytes %g: the rate "
			"must be a positive number, the window 0 (none) or more\n", hook, r, w);
		exit(1);
	}
	q->rate_bps = r < q->line_bps ? r : q->line_bps;
}
#endif

/* a positive ACK of sequence `acked` reached q's congestion control (before it moves
 * snd_una): its RTT when q remembers sending it, the telemetry it echoes (`echo`, NULL:
 * none), the mark it echoes (`ecn`) */
static void cc_on_ack(struct qp *q, uint32_t acked, uint64_t now, const uint8_t *echo,
		      int ecn)
{
	uint64_t rtt = 0;

	if (q->ring_psn && q->ring_psn[acked % RTT_RING] == acked) {
		rtt = now - q->ring_ns[acked % RTT_RING];
		q->ring_psn[acked % RTT_RING] = NO_SAMPLE;    /* one sample per packet */
		q->rtt_samples++;
		q->rtt_sum_ns += rtt;
		if (!q->rtt_min_ns || rtt < q->rtt_min_ns)
			q->rtt_min_ns = rtt;
		if (rtt > q->rtt_max_ns)
			q->rtt_max_ns = rtt;
	}
	if (cc == CC_TIMELY && rtt) {
		timely_on_rtt(&q->tm, &q->tp, rtt, acked, q->snd_nxt);
		q->rate_bps = q->tm.rate;
	} else if (cc == CC_HPCC && echo && echo[1] <= INT_MAX_HOPS) {
		uint64_t hops[INT_MAX_HOPS];

		q->int_hops = echo[1];
		for (uint32_t i = 0; i < echo[1]; i++)
			hops[i] = get_be64(echo + INT_HDR_LEN + i * INT_HOP_LEN);
		hpcc_on_ack(&q->hp, &q->hpar, acked, q->snd_nxt, hops, echo[1]);
		q->rate_bps = q->hp.rate;
	} else if (cc == CC_NSCC) {
		/* what this ACK newly acknowledges, and what stays in flight, on the wire */
		int32_t newly = (int32_t)(acked + 1 - q->snd_una);
		int32_t left = (int32_t)(q->snd_nxt - acked - 1);

		if (newly > 0)
			nscc_on_ack(&q->ns, &q->nsp, now, (double)newly * wire_len(mtu), rtt, ecn,
				    left > 0 ? (double)left * wire_len(mtu) : 0);
	}
#ifdef USER_CC_H
	if (cc == CC_USER) {
		uint64_t hops[INT_MAX_HOPS];
		struct cc_ack a = { .now_ns = now, .rtt_ns = rtt, .acked = acked,
				    .snd_nxt = q->snd_nxt, .records = hops };

		if (echo && echo[1] <= INT_MAX_HOPS) {
			q->int_hops = a.hops = echo[1];
			for (uint32_t i = 0; i < echo[1]; i++)
				hops[i] = get_be64(echo + INT_HDR_LEN + i * INT_HOP_LEN);
		}
		user_cc_on_ack(&q->uc, &q->ue, &a);
		user_take(q, "user_cc_on_ack");
	}
#endif
}

/* a timeout or a NAK reached q's congestion control (a user's hears of it) */
static void cc_on_loss(struct qp *q, uint64_t now)
{
#ifdef USER_CC_H
	if (cc == CC_USER && q->requester) {
		user_cc_on_loss(&q->uc, &q->ue, now);
		user_take(q, "user_cc_on_loss");
	}
#endif
	if (cc == CC_NSCC && q->requester)
		nscc_on_loss(&q->ns, &q->nsp, now, wire_len(mtu),
			     (double)(q->snd_nxt - q->snd_una) * wire_len(mtu));
}

static int op_ends_message(uint8_t op)
{
	return op == OP_WRITE_LAST || op == OP_WRITE_ONLY || op == OP_SEND_LAST ||
	       op == OP_SEND_ONLY;
}

/* IRN enters recovery: resend what is missing below the highest selectively acknowledged
 * sequence, or below `lost` (after a timeout: all that was sent) */
static void irn_recover(struct qp *q, uint32_t lost)
{
	q->in_recovery = 1;
	q->recovery_end = q->high;
	q->rtx_ptr = q->snd_una;
	q->lost_high = lost;
}

/* a message has arrived whole, in order, at q's responder */
static void message_in(struct qp *q)
{
	q->msn++;
	if (control)
		printf("recv %u %u\n", q->qpn, q->msn);
}

static void on_packet(int fd, const uint8_t *buf, size_t len, int tos, uint64_t now)
{
	struct bth h;
	struct qp *q;

	ack_ce = 0;
	if (bth_get(buf, len, &h) < 0 || !(q = qp_by_qpn(h.dest_qp)))
		return;
	if (op_is_data(h.opcode)) {
		uint32_t psn = psn_unwrap(h.psn, q->epsn);
		size_t hdr = ROCE_BTH_LEN + (h.intf ? INT_LEN : 0);
		const uint8_t *echo = h.intf ? buf + ROCE_BTH_LEN : NULL;
		int32_t d = (int32_t)(psn - q->epsn);
		size_t payload;

		if (len < hdr + ROCE_ICRC_LEN)
			return;
		payload = len - hdr - ROCE_ICRC_LEN;
		q->seen++;
		if (drop_every && q->seen % drop_every == 0) {
			q->test_drops++;
			return;
		}
		if (ce_every && q->seen % ce_every == 0)
			tos |= 0x3;          /* tests: as if the switch had marked it */
		/* NSCC: the mark goes back on this packet's ACK (BECN), not in a CNP */
		ack_ce = cc == CC_NSCC && (tos & 0x3) == 0x3;
		if (d >= 0 && (int32_t)(psn - q->rx_high) < 0 && !(use_irn && bit(q->kept, psn))) {
			q->reordered++;      /* a higher PSN came first: reordered, or resent */
			if (q->rx_high - 1 - psn > q->reorder_max)
				q->reorder_max = q->rx_high - 1 - psn;
		}
		if ((int32_t)(psn + 1 - q->rx_high) > 0)
			q->rx_high = psn + 1;
		if (ack_ce) {
			q->ce_rx++;
		} else if ((tos & 0x3) == 0x3 && cc == CC_DCQCNP) {
			q->ce_rx++;
			q->last_ce_ns = now;
			q->np_pending = 1;
			if (!q->np_listed) {         /* eligible at once, as a newly congested flow */
				q->np_listed = 1;
				q->last_cnp_ns = now - np_min_interval_ns;
				if (!np_n)
					np_next_ns = now;
				np_list[np_n++] = (int)(q - qps);
			}
		} else if ((tos & 0x3) == 0x3) {
			q->ce_rx++;
			if ((now - q->last_cnp_ns >= cnp_interval_ns || !q->cnps_tx) &&
			    send_ctrl(fd, q, OP_CNP, 0, 0, NULL) == 0) {
				q->cnps_tx++;        /* one that could not go: the next mark retries */
				q->last_cnp_ns = now;
			}
		}
		if (d == 0) {
			q->epsn++;
			q->rx_pkts++;
			q->rx_bytes += payload;
			q->nak_sent = 0;
			if (op_ends_message(h.opcode))
				message_in(q);
			while (use_irn && bit(q->kept, q->epsn)) {   /* kept ones are in order now */
				set_bit(q->kept, q->epsn, 0);
				if (bit(q->kept_last, q->epsn)) {
					message_in(q);
					h.ackreq = 1;        /* a message ended: acknowledge now */
				}
				set_bit(q->kept_last, q->epsn, 0);
				q->epsn++;
			}
			if ((++q->since_ack >= ack_every || h.ackreq) &&
			    send_ctrl(fd, q, OP_ACK, AETH_ACK, q->epsn - 1, echo) == 0) {
				q->acks_tx++;        /* one that could not go: the next packet's covers it */
				q->since_ack = 0;
			}
		} else if (d > 0 && use_irn) {   /* kept, and named in a NAK */
			if (d >= IRN_WIN) {
				q->ooo_drops++;
				return;
			}
			if (bit(q->kept, psn)) {
				q->dup_pkts++;
			} else {
				set_bit(q->kept, psn, 1);
				set_bit(q->kept_last, psn, op_ends_message(h.opcode));
				q->ooo_kept++;
				q->rx_pkts++;
				q->rx_bytes += payload;
			}
			if (send_ctrl_sack(fd, q, OP_ACK, AETH_NAK_PSN_SEQ, q->epsn, echo, psn) == 0)
				q->naks_tx++;
		} else if (d > 0) {      /* a gap: one NAK, then silence until it fills */
			q->ooo_drops++;
			if (!q->nak_sent &&
			    send_ctrl(fd, q, OP_ACK, AETH_NAK_PSN_SEQ, q->epsn, echo) == 0) {
				q->naks_tx++;        /* one that could not go: the next gap packet retries */
				q->nak_sent = 1;
			}
		} else {                 /* a duplicate: acknowledged again */
			q->dup_pkts++;
			if (send_ctrl(fd, q, OP_ACK, AETH_ACK, q->epsn - 1, echo) == 0)
				q->acks_tx++;
		}
	} else if (h.opcode == OP_ACK && len >= ROCE_BTH_LEN + ROCE_AETH_LEN) {
		uint32_t psn = psn_unwrap(h.psn, q->snd_una);
		uint8_t syn = buf[ROCE_BTH_LEN];

		if ((syn & 0xe0) == AETH_NAK_PSN_SEQ && use_irn && q->sacked) {
			q->naks_rx++;
			ack_progress(q, psn, now);       /* all before it arrived */
			if (!spray_evs && cc != CC_NSCC)
				cc_on_loss(q, now);
			q->progress_ns = now;
			if (len >= ROCE_BTH_LEN + ROCE_AETH_LEN + 4) {
				uint32_t s = psn_unwrap(get_be24(buf + ROCE_BTH_LEN + ROCE_AETH_LEN + 1),
							q->snd_una);

				if ((int32_t)(s - q->snd_una) >= 0 && (int32_t)(q->high - s) > 0) {
					set_bit(q->sacked, s, 1);
					q->sacks_rx++;
					/* the cumulative ACK that later names it would time the hole */
					if (q->ring_psn && q->ring_psn[s % RTT_RING] == s)
						q->ring_psn[s % RTT_RING] = NO_SAMPLE;
					if ((int32_t)(s + 1 - q->sack_high) > 0)
						q->sack_high = s + 1;
				}
			}
			/* sprayed: a hole is lost once REORDER_PKTS beyond it are acknowledged;
			 * before, it may only be on a slower path */
			if (!q->in_recovery && (!spray_evs ||
			    (int32_t)(q->sack_high - q->snd_una) > (int32_t)spray_reorder)) {
				if (spray_evs || cc == CC_NSCC)   /* NSCC: once per hole */
					cc_on_loss(q, now);
				irn_recover(q, q->snd_una);
			}
		} else if ((syn & 0xe0) == AETH_NAK_PSN_SEQ) {
			q->naks_rx++;
			ack_progress(q, psn, now);       /* all before it arrived */
			cc_on_loss(q, now);
			if ((int32_t)(psn - q->snd_una) >= 0 && (int32_t)(q->snd_nxt - psn) > 0)
				q->snd_nxt = psn;         /* go back to it */
		} else if ((syn & 0xe0) == 0) {
			q->acks_rx++;
			q->becn_rx += h.becn;
			if (q->requester)
				cc_on_ack(q, psn, now, h.intf && len >= ROCE_BTH_LEN + ROCE_AETH_LEN +
					  INT_LEN ? buf + ROCE_BTH_LEN + ROCE_AETH_LEN : NULL, h.becn);
			ack_progress(q, psn + 1, now);
		}
	} else if (h.opcode == OP_CNP) {
		q->cnps_rx++;
#ifdef USER_CC_H
		if (cc == CC_USER && q->requester) {
			user_cc_on_cnp(&q->uc, &q->ue, now);
			user_take(q, "user_cc_on_cnp");
		}
#endif
		if (cc == CC_DCQCN && q->requester) {
			dcqcn_on_cnp(&q->dc, &q->dp, now);
			q->rate_bps = q->dc.rc;
		} else if (cc == CC_DCQCNP && q->requester &&
			   len >= ROCE_BTH_LEN + ROCE_CNP_PAD) {
			uint64_t tau_us = (uint64_t)buf[ROCE_BTH_LEN] << 24 |
					  get_be24(buf + ROCE_BTH_LEN + 1);

			dcqcnp_on_cnp(&q->dq, &q->dqp, now, tau_us * 1000,
				      (double)wire_len(mtu) * 8);
			q->rate_bps = q->dq.rc;
		}
	}
}

static void write_out(const char *path, uint64_t t0, double t0_unix)
{
	FILE *f = fopen(path, "w");
	struct rusage ru;

	if (!f)
		die("cannot write the output");
	getrusage(RUSAGE_SELF, &ru);
	fprintf(f, "{\"t0_unix\": %.6f, \"mtu\": %u, \"eagain\": %llu,\n", t0_unix, mtu,
		(unsigned long long)eagain);
	fprintf(f, " \"cpu_s\": %.6f,\n \"qps\": [",
		ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		ru.ru_stime.tv_usec / 1e6);
	for (int i = 0; i < nqps; i++) {
		struct qp *q = &qps[i];
		uint64_t cuts = cc == CC_DCQCN ? q->dc.cuts : cc == CC_TIMELY ? q->tm.cuts :
				cc == CC_HPCC ? q->hp.cuts : cc == CC_DCQCNP ? q->dq.cuts :
				cc == CC_NSCC ? q->ns.cuts : 0;
		uint64_t updates = cc == CC_DCQCN ? q->dc.increases :
				   cc == CC_TIMELY ? q->tm.updates : cc == CC_HPCC ? q->hp.commits :
				   cc == CC_DCQCNP ? q->dq.increases : cc == CC_NSCC ? q->ns.updates : 0;

		fprintf(f, "%s\n  {\"qpn\": %u, \"peer_qpn\": %u, \"line_mbps\": %.3f, "
			"\"tx_pkts\": %llu, \"tx_bytes\": %llu, \"retx_pkts\": %llu, "
			"\"rx_pkts\": %llu, \"rx_bytes\": %llu, \"ooo_drops\": %llu, "
			"\"dup_pkts\": %llu, \"acks_tx\": %llu, \"acks_rx\": %llu, "
			"\"naks_tx\": %llu, \"naks_rx\": %llu, \"cnps_tx\": %llu, "
			"\"cnps_rx\": %llu, \"ce_rx\": %llu, \"timeouts\": %llu, "
			"\"test_drops\": %llu, \"rate_cuts\": %llu, \"rate_updates\": %llu, "
			"\"alpha\": %.6f, \"hpcc_u\": %.6f, \"rtt_samples\": %llu, "
			"\"rtt_min_us\": %.3f, \"rtt_mean_us\": %.3f, \"rtt_max_us\": %.3f, "
			"\"int_hops\": %u, \"ooo_kept\": %llu, \"sacks_rx\": %llu, "
			"\"reordered\": %llu, \"reorder_max\": %llu, \"pace_lost_us\": %.1f, "
			"\"pace_lost_cpu_us\": %.1f, \"becn_rx\": %llu}",
			i ? "," : "", q->qpn, q->peer_qpn,
			q->line_bps / 1e6,
			(unsigned long long)q->tx_pkts, (unsigned long long)q->tx_bytes,
			(unsigned long long)q->retx_pkts, (unsigned long long)q->rx_pkts,
			(unsigned long long)q->rx_bytes, (unsigned long long)q->ooo_drops,
			(unsigned long long)q->dup_pkts, (unsigned long long)q->acks_tx,
			(unsigned long long)q->acks_rx, (unsigned long long)q->naks_tx,
			(unsigned long long)q->naks_rx, (unsigned long long)q->cnps_tx,
			(unsigned long long)q->cnps_rx, (unsigned long long)q->ce_rx,
			(unsigned long long)q->timeouts, (unsigned long long)q->test_drops,
			(unsigned long long)cuts, (unsigned long long)updates,
			cc == CC_DCQCN ? q->dc.alpha : cc == CC_DCQCNP ? q->dq.alpha : 0.0,
			cc == CC_HPCC ? q->hp.u : 0.0,
			(unsigned long long)q->rtt_samples, q->rtt_min_ns / 1e3,
			q->rtt_samples ? q->rtt_sum_ns / 1e3 / (double)q->rtt_samples : 0.0,
			q->rtt_max_ns / 1e3, q->int_hops, (unsigned long long)q->ooo_kept,
			(unsigned long long)q->sacks_rx, (unsigned long long)q->reordered,
			(unsigned long long)q->reorder_max, q->late_ns / 1e3, q->late_cpu_ns / 1e3,
			(unsigned long long)q->becn_rx);
	}
	fprintf(f, "],\n \"msgs\": [");
	for (int i = 0, j = 0; i < nqps; i++)
		for (int k = 0; k < qps[i].nm; k++, j++) {
			struct msg *m = &qps[i].m[k];

			fprintf(f, "%s\n  [%u, %llu, %.3f, %.3f]", j ? "," : "", m->qpn,
				(unsigned long long)m->bytes, m->start_ns / 1e3,
				m->end_ns ? (m->end_ns - t0) / 1e3 : -1.0);
		}
	fprintf(f, "],\n \"samples\": [");
	for (size_t k = 0; k < nsamples; k++)
		fprintf(f, "%s\n  [%u, %.3f, %.3f, %.3f]", k ? "," : "", samples[k].qpn,
			(samples[k].t_ns - t0) / 1e3, samples[k].rate_mbps, samples[k].tx_mbps);
	fprintf(f, "]}\n");
	if (fclose(f))
		die("cannot write the output");
}

static uint64_t last_sample_ns;

/* each busy requester QP's rate and what it sent since the last sample, over the real
 * interval (a QP with nothing to send that sent nothing has no sample) */
static void take_samples(uint64_t now)
{
	double interval_us = (now - last_sample_ns) / 1e3;

	if (interval_us <= 0)
		return;
	for (int i = 0; i < nqps; i++) {
		struct qp *q = &qps[i];

		if (!q->requester || (!q->tx_wire_interval && (!q->posted ||
		    (q->snd_una == q->snd_end && q->posted == q->nm))))
			continue;             /* a responder only, or nothing to send and nothing sent */
		if (nsamples == cap_samples) {
			cap_samples = cap_samples ? 2 * cap_samples : 1024;
			samples = realloc(samples, cap_samples * sizeof(*samples));
			if (!samples)
				die("out of memory");
		}
		samples[nsamples++] = (struct sample){
			.qpn = q->qpn, .t_ns = now, .rate_mbps = q->rate_bps / 1e6,
			.tx_mbps = q->tx_wire_interval * 8 / interval_us };
		q->tx_wire_interval = 0;
	}
	last_sample_ns = now;
}

/* DCQCN+'s notification point: the scan's ticks due at `now`, each visiting one listed
 * QP (dropping one without a mark for the entry timeout) and sending it a CNP if a mark
 * waits and its last CNP is min_interval old */
static void np_scan(int fd, uint64_t now)
{
	if (np_n && (int64_t)(now - np_next_ns) > (int64_t)((uint64_t)np_n * np_scan_ns))
		np_next_ns = now;            /* late by a round: no burst of catch-up visits */
	while (np_n && now >= np_next_ns) {
		struct qp *q = &qps[np_list[np_at % np_n]];

		if (now - q->last_ce_ns > np_timeout_ns) {
			int last = np_list[np_n - 1];

			q->np_listed = 0;
			np_list[np_at % np_n] = last;
			np_n--;
			continue;
		}
		if (q->np_pending && now - q->last_cnp_ns >= np_min_interval_ns &&
		    send_ctrl_sack(fd, q, OP_CNP, 0, 0, NULL,
				   (uint32_t)((uint64_t)np_n * np_scan_ns / 1000)) == 0) {
			q->np_pending = 0;
			q->last_cnp_ns = now;
			q->cnps_tx++;
		}
		np_at = (np_at + 1) % np_n;
		np_next_ns += np_scan_ns;
	}
}

/* A raw UDP socket for sending, when a QP has its own source port: one socket, so the
 * host's send buffer (the NIC's ring) stays one, as with the bound socket `fd`. A raw
 * socket takes up to twice its buffer before it refuses (ENOBUFS, not EAGAIN: the kernel
 * has no transport header of its own to wait on), so it gets half of fd's: it refuses at
 * the same fill, and says it has room again at a quarter of it where fd says so at half.
 * It receives a copy of every UDP packet the host gets; a filter drops them all at once. */
/* Control mode: the commands waiting on stdin, `post QPN BYTES` (a WRITE, posted now) or
 * `end`; the end of stdin (its writer gone) ends the engine too. */
static void read_commands(uint64_t t0, uint64_t now)
{
	static char cmd[4096];
	static size_t have;
	ssize_t n;

	while ((n = read(0, cmd + have, sizeof(cmd) - 1 - have)) > 0) {
		char *line = cmd, *nl;

		have += (size_t)n;
		cmd[have] = 0;
		while ((nl = strchr(line, '\n'))) {
			unsigned qpn;
			unsigned long long bytes;
			struct qp *q;

			*nl = 0;
			if (sscanf(line, "post %u %llu", &qpn, &bytes) == 2) {
				if (!(q = qp_by_qpn(qpn)) || !bytes)
					die("post: an unknown qp, or no bytes");
				add_msg(q, now - t0, bytes);
			} else if (!strcmp(line, "end")) {
				stop = 1;
			} else if (*line) {
				die("unknown command");
			}
			line = nl + 1;
		}
		have -= (size_t)(line - cmd);
		memmove(cmd, line, have);
		if (have == sizeof(cmd) - 1)
			die("command too long");
	}
	if (n == 0)
		stop = 1;
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		die_errno("cannot read commands");
}

static void open_raw(int fd)
{
	struct sock_filter none = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { .len = 1, .filter = &none };
	struct sockaddr_in src = bind_addr;
	int any = 0, sndbuf = 0;
	socklen_t n = sizeof(sndbuf);

	for (int i = 0; i < nqps; i++)
		any |= qps[i].sport != 0;
	if (!any)
		return;
	src.sin_port = 0;
	raw_fd = socket(AF_INET, SOCK_RAW, IPPROTO_UDP);
	if (raw_fd < 0 || setsockopt(raw_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) ||
	    bind(raw_fd, (struct sockaddr *)&src, sizeof(src)))
		die_errno("cannot open a raw socket for per-QP source ports (root needed)");
	/* the kernel keeps twice what is set: fd's buffer over 4 leaves the raw one half */
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &n))
		die_errno("cannot read the RoCE socket's send buffer");
	sndbuf /= 4;
	if (setsockopt(raw_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)))
		die_errno("cannot size the raw socket's send buffer");
}

int main(int argc, char **argv)
{
	struct timespec wall;
	uint64_t t0, next_sample, done_ns = 0;
	int fd, one = 1, bufsize = 4 << 20;
	double t0_unix;

	if (argc != 3)
		die("usage: tbroce CONFIG OUT.json");
	read_config(argv[1]);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&bind_addr, sizeof(bind_addr)))
		die_errno("cannot bind the RoCE port");
	/* the socket buffers are the NIC's rings: deep enough that the host's scheduler, not
	 * the engine, is what a loaded machine shows (forced beyond rmem_max as root) */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof(bufsize)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize));
	/* no UDP checksum, as RoCEv2 sends (its ICRC covers the packet); the switches' telemetry
	 * records are written only into packets without one */
	if (setsockopt(fd, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)))
		die_errno("cannot turn the UDP checksum off");
	open_raw(fd);
	prctl(PR_SET_TIMERSLACK, 1UL);  /* wake-ups on time (the default slack is 50 us) */
	schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (control && fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK))
		die_errno("cannot read commands without blocking");
	printf("ready\n");
	fflush(stdout);
	if (start_at_unix > 0) {
		struct timespec at = { .tv_sec = (time_t)start_at_unix,
			.tv_nsec = (long)((start_at_unix - (double)(time_t)start_at_unix) * 1e9) };

		while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL) == EINTR && !stop)
			;
	}
	clock_gettime(CLOCK_REALTIME, &wall);
	t0 = now_ns();
	t0_unix = wall.tv_sec + wall.tv_nsec / 1e9;
	next_sample = t0 + sample_ns;
	last_sample_ns = t0;
	for (int i = 0; i < nqps; i++) {
		struct qp *q = &qps[i];

		q->next_tx_ns = q->progress_ns = t0;
		q->dp = dcp;
		q->dp.line_bps = q->line_bps;
		dcqcn_init(&q->dc, &q->dp, t0);
		q->tp = tlp;
		q->tp.line_bps = q->line_bps;
		timely_init(&q->tm, &q->tp);
		q->hpar = hpp;
		q->hpar.line_bps = q->line_bps;
		hpcc_init(&q->hp, &q->hpar);
		q->dqp = dqp;
		q->dqp.line_bps = q->line_bps;
		dcqcnp_init(&q->dq, &q->dqp);
		if (cc == CC_NSCC) {         /* the shares, at this QP's line and T */
			double bdp = q->line_bps * (double)ns_base_rtt_ns / 8e9;

			q->nsp = (struct nscc_params){
				.mtu = wire_len(mtu), .maxwnd = ns_maxwnd_bdp * bdp,
				.fi = ns_fi_bdp * bdp, .eta = ns_eta_bdp * bdp,
				.alpha = ns_alpha_bdp * bdp / (double)ns_base_rtt_ns,
				.fi_scale = ns_fi_scale, .gamma = ns_gamma, .md_floor = ns_md_floor,
				.delay_alpha = ns_delay_alpha,
				.fulfil_bytes = ns_fulfil_pkts * wire_len(mtu),
				.base_rtt_ns = ns_base_rtt_ns,
				.target_ns = (uint64_t)(ns_target_rtt * (double)ns_base_rtt_ns),
				.fast_ns = (uint64_t)(ns_fast_rtt * (double)ns_base_rtt_ns),
				.qa_delay_ns = (uint64_t)(ns_qa_targets * ns_target_rtt *
							  (double)ns_base_rtt_ns),
				.qa_gate = ns_qa_gate };
			nscc_init(&q->ns, &q->nsp, t0);
		}
		q->ue = user_env;
		q->ue.line_bps = q->line_bps;
		q->ue.mtu = mtu;
		q->ue.wire_bytes = wire_len(mtu);
#ifdef USER_CC_H
		if (cc == CC_USER) {
			user_cc_init(&q->uc, &q->ue);
			user_take(q, "user_cc_init");
		}
#endif
		if (q->requester) {
			q->ring_psn = malloc(RTT_RING * sizeof(*q->ring_psn));
			q->ring_ns = malloc(RTT_RING * sizeof(*q->ring_ns));
			if (!q->ring_psn || !q->ring_ns)
				die("out of memory");
			memset(q->ring_psn, 0xff, RTT_RING * sizeof(*q->ring_psn));
		}
		if (use_irn) {
			q->sacked = calloc(IRN_WIN / 8, 1);
			q->kept = calloc(IRN_WIN / 8, 1);
			q->kept_last = calloc(IRN_WIN / 8, 1);
			if (!q->sacked || !q->kept || !q->kept_last)
				die("out of memory");
		}
	}

	while (!stop) {
		uint64_t now = now_ns(), wake = now + 100000000ull;
		int busy = 0, pending = 0, queued = 0;
		struct timespec ts;
		/* the bound socket, the raw one (for POLLOUT) or -1, the commands or -1 */
		struct pollfd p[3] = { { .fd = fd, .events = POLLIN }, { .fd = raw_fd },
				       { .fd = control ? 0 : -1, .events = POLLIN } };

		/* SIOCOUTQ: what the engine's sending socket still holds (in the host's qdisc, or
		 * not yet taken by the switch), read before this pass's ACKs add to it */
		backlog_held = now > lose_from &&
			ioctl(raw_fd >= 0 ? raw_fd : fd, SIOCOUTQ, &queued) == 0 && queued > 0;
		lose_from = UINT64_MAX;
		pass_cpu = 0;

		for (;;) {           /* everything that has arrived */
			uint8_t buf[MAX_PKT];
			char cbuf[CMSG_SPACE(sizeof(int))];
			struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
					     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
			struct cmsghdr *cm;
			ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
			int tos = 0;

			if (n < 0)
				break;
			for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
				if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS)
					tos = *(uint8_t *)CMSG_DATA(cm);
			on_packet(fd, buf, (size_t)n, tos, now_ns());
		}
		now = now_ns();
		if (control) {
			read_commands(t0, now);
			if (stop)
				break;
		}
		for (int i = 0; i < nqps; i++) {
			struct qp *q = &qps[i];
			uint64_t rto;
			int64_t seq;

			while (q->posted < q->nm && t0 + q->m[q->posted].start_ns <= now) {
				struct msg *m = &q->m[q->posted++];

				q->snd_end = m->first + m->npkts;
				if (q->snd_una == q->snd_nxt)
					q->progress_ns = now;
			}
			if (q->posted < q->nm) {
				uint64_t at = t0 + q->m[q->posted].start_ns;

				pending = 1;
				if (at < wake)
					wake = at;
			}
			if (q->snd_una != q->snd_end)
				pending = 1;
			if (cc == CC_DCQCN && q->requester) {
				dcqcn_on_time(&q->dc, &q->dp, now);
				q->rate_bps = q->dc.rc;
				if (dcqcn_next_ns(&q->dc) < wake)
					wake = dcqcn_next_ns(&q->dc);
			}
#ifdef USER_CC_H
			if (cc == CC_USER && q->requester) {
				uint64_t at = user_cc_on_time(&q->uc, &q->ue, now);

				user_take(q, "user_cc_on_time");
				if (at && at < wake)
					wake = at;
			}
#endif
			if (cc == CC_DCQCNP && q->requester) {
				dcqcnp_on_time(&q->dq, &q->dqp, now);
				q->rate_bps = q->dq.rc;
				if (dcqcnp_next_ns(&q->dq) < wake)
					wake = dcqcnp_next_ns(&q->dq);
			}
			/* a retransmission timeout: back to the oldest unacknowledged. Not while the
			 * host's queue holds the engine's sends (a pause): that time is not the
			 * network's, and resending what still waits in the host would double it */
			if (q->progress_ns < unblocked_ns)
				q->progress_ns = unblocked_ns;
			rto = !use_irn ? rto_ns : q->high - q->snd_una <= irn_n ? irn_rto_low_ns :
				irn_rto_high_ns;
			if (!tx_blocked && q->snd_una != q->snd_nxt && now - q->progress_ns > rto) {
				q->timeouts++;
				cc_on_loss(q, now);
				if (use_irn)
					irn_recover(q, q->high);
				else
					q->snd_nxt = q->snd_una;
				q->progress_ns = now;
			}
			seq = tx_blocked ? -1 : next_seq(q);
			if (seq >= 0) {
				if (q->next_tx_ns <= now) {
					if (send_data(fd, q, (uint32_t)seq, now) == 0)
						busy = 1;
				}
				if (q->next_tx_ns < wake)
					wake = q->next_tx_ns;
			} else if (!tx_blocked && q->snd_una != q->snd_nxt &&
				   q->progress_ns + rto + 1 < wake) {
				/* (while blocked no timeout runs: its deadline is no reason to wake,
				 * and waking for it would spin without ever polling for room) */
				wake = q->progress_ns + rto + 1;
			}
			/* a packet ready now waits for its pace alone (not for an ACK, a window
			 * or room in the host's queue): a later send beyond the limiter's burst
			 * credit is the engine's lateness */
			seq = tx_blocked ? -1 : next_seq(q);
			q->paced = seq >= 0;
			if (q->paced && late_from(q, (uint32_t)seq) < lose_from)
				lose_from = late_from(q, (uint32_t)seq);
		}
		if (cc == CC_DCQCNP) {
			np_scan(fd, now);
			if (np_n && np_next_ns < wake)
				wake = np_next_ns;
		}
		if (now >= next_sample) {
			/* the next interval is a whole sample_us from this one, even when this
			 * sample came late: a short interval would show a legal burst as a rate
			 * above the line */
			take_samples(now);
			next_sample = now + sample_ns;
		}
		if (next_sample < wake)
			wake = next_sample;
		if (nmsgs && !pending && !control) {
			if (!done_ns) {
				done_ns = now;
				printf("done\n");
				fflush(stdout);
			}
			if (exit_when_done && now - done_ns >= linger_ns)
				break;
			if (exit_when_done && done_ns + linger_ns < wake)
				wake = done_ns + linger_ns;
		}
		if (end_after_ns) {
			if (now - t0 >= end_after_ns)
				break;
			if (t0 + end_after_ns < wake)
				wake = t0 + end_after_ns;
		}
		if (control)
			fflush(stdout);      /* what completed, told before sleeping */
		if (busy)
			continue;
		now = now_ns();
		if (wake <= now)
			continue;
		ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
		ts.tv_nsec = (long)((wake - now) % 1000000000ull);
		if (tx_blocked)
			p[raw_fd >= 0].events |= POLLOUT;
		cpu_mark = cpu_time_ns();      /* a late wake-up is charged from here */
		if (ppoll(p, 3, &ts, NULL) > 0 && (p[raw_fd >= 0].revents & POLLOUT)) {
			tx_blocked = 0;
			unblocked_ns = now_ns();
		}
	}
	if (now_ns() - last_sample_ns >= sample_ns)   /* a shorter last interval would read */
		take_samples(now_ns());               /* a legal burst as above the line */
	write_out(argv[2], t0, t0_unix);
	return 0;
}

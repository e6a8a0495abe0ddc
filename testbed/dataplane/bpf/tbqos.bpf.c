// SPDX-License-Identifier: GPL-2.0
/*
 * Per-packet switch dataplane of the testbed: traffic classes, queue accounting, ECN marking
 * and PFC detection. Attached at tc clsact on every fabric interface:
 *
 *   egress  (the interface's own transmit queue): classify by DSCP into an HTB class
 *           (skb->priority), drop when the class's buffer is full (tail drop), mark CE
 *           (step K or RED-like Kmin/Kmax/Pmax on the instantaneous queue), count; at a
 *           switch, fill the next telemetry record of a RoCE packet that carries them
 *           (int_wire.h: HPCC's in-band telemetry).
 *   ingress (the receiving end of a link): the packet has left the transmitter's queue, so
 *           count the dequeue there; at a switch, account the bytes this ingress port holds
 *           per class (PFC is accounted per ingress port and priority, as in a switch ASIC)
 *           and raise XOFF/XON events on a ring buffer for the pause executor.
 *
 * Queue occupancy is enqueued minus dequeued bytes of the class, so a packet counts as queued
 * from its arrival until the far end of the link receives it (the qdisc backlog plus the
 * microseconds on the veth). A link between two servers of a cluster (testbed/cluster/) is
 * a VXLAN device at each end, in two kernels with a map set each: there the dequeue is
 * counted by tb_underlay, on the server's own network device, as the encapsulated packet
 * leaves the kernel that queued it. Drops are done here, before the qdisc, and return TC_ACT_STOLEN:
 * the sender (OVS's send path) sees success, so it never retries and the drop is counted once,
 * here (see docs/FIDELITY.md, tail drop on the userspace datapath).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "int_wire.h"

#define MAX_PORTS 1024
#define NCLASS 8
#define NDSCP 64
#define NONE 0xffffffffu
/* Resuming a class (opening its tbf gate) does not run the interface's qdisc; when nothing
 * else arrives, the held packets would wait for the next packet. The pause executor then
 * sends one frame of this local-experimental EtherType; it is not accounted, and the far
 * end's ingress program drops it. */
#define ETH_P_TB_KICK 0x88B5
#define ECN_OFF 0
#define ECN_STEP 1
#define ECN_RED 2

/* An interface. Switch ports live in the initial namespace, where ifindex is unique. A host's
 * NICs live in its own namespace, where ifindex repeats from host to host and
 * bpf_get_netns_cookie() does not help (without a socket it reports the initial namespace), so
 * they are known by their MAC address: the source of what they send, the destination of
 * what they receive. */
struct if_key {
	__u64 mac;             /* host NIC: its MAC (6 bytes, little-endian in a u64); else 0 */
	__u32 ifindex;         /* switch port: its ifindex; else 0 */
	__u32 pad;
};

struct port_cfg {          /* egress: key if_key */
	__u32 port;            /* port id: index into the per-port arrays */
	__u32 htb_major;       /* HTB root handle major of this interface */
	__u32 flags;           /* PORT_HOST: a host NIC, whose drops go back to its stack */
	__u32 sw;              /* switch index of a switch port, NONE for a host NIC */
};

#define PORT_HOST 1

struct rx_cfg {            /* ingress: key if_key of the receiving end */
	__u32 tx_port;         /* port id of the transmitter at the other end */
	__u32 rx_port;         /* port id of this end when it is a switch port, else NONE */
	__u32 tx_switch;       /* switch index of the transmitter, NONE for a host */
	__u32 rx_switch;       /* switch index of this end, NONE for a host */
};

struct qcfg {              /* per port and class */
	__u32 limit_bytes;
	__u32 limit_pkts;
	__u32 ecn_mode;
	__u32 kmin_bytes;
	__u32 kmax_bytes;
	__u32 pmax_ppm;        /* marking probability at kmax, parts per million */
	__u32 pad[2];
};

struct qstate {            /* per port and class; read by telemetry through mmap */
	__s64 bytes;
	__s64 pkts;
	__u64 enq_pkts;
	__u64 deq_pkts;
	__u64 drops;
	__u64 marks;
	__u64 not_ect_over_k;  /* packets that would be marked but are not ECN-capable */
	__u64 enq_bytes;
	__u64 kicks;           /* resume kicks sent from this port (class 0 slot only) */
};

struct dscp_stats {        /* per port and DSCP (each job's own code point); read through mmap */
	__u64 enq_bytes;
	__u64 enq_pkts;
	__u64 marks;
	__u64 drops;
};

struct pfc_cfg {           /* per switch ingress port and class */
	__u32 enabled;
	__u32 xoff_bytes;
	__u32 xon_bytes;
	__u32 headroom_bytes;
};

struct ingress {           /* per switch ingress port and class; read through mmap */
	__s64 bytes;           /* bytes that came in here and are still in this switch */
	__u64 paused;          /* 1 between XOFF and XON */
	__u64 xoff_ns;
	__u64 pauses;
	__u64 bytes_after_xoff;    /* of the current/last pause: arrivals after XOFF */
	__u64 last_arrival_ns;     /* of the current/last pause: last arrival after XOFF */
	__u64 paused_ns;           /* total time between XOFF and XON */
	__u64 overflow_drops;      /* headroom exceeded: a lossless class lost a packet */
	__u64 untracked;           /* arrivals not accounted (see tb_pkts) */
	__u64 overflow_escaped;    /* headroom exceeded, but OVS had forwarded it already */
};

struct pkt_key {           /* identifies a packet inside one switch */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u16 ip_id;
	__u8 proto;
	__u8 pad;
	__u32 sw;
};

#define PKT_TOMBSTONE 0xffffffffu  /* slot of a packet seen leaving before it was seen arriving */
#define PKT_DROP 1                 /* flags: headroom overflowed; drop it at the egress */

struct pkt_val {
	__u32 slot;            /* ingress port * NCLASS + class, or PKT_TOMBSTONE */
	__u32 len;
	__u32 flags;
	__u32 pad;
};

enum { EV_XOFF = 1, EV_XON = 2, EV_OVERFLOW = 3 };

struct event {
	__u64 ns;
	__u64 xoff_ns;
	__u64 last_arrival_ns;
	__u64 bytes_after_xoff;
	__u32 kind;
	__u32 rx_port;
	__u32 tx_port;         /* the link the event was detected on (for XON: downstream) */
	__u32 cls;
	__s64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, struct if_key);
	__type(value, struct port_cfg);
} tb_port_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, struct if_key);
	__type(value, struct rx_cfg);
} tb_rx_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} tb_dscp SEC(".maps");

struct {                   /* 1 for the classes that PFC makes lossless (set by the PFC app) */
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NCLASS);
	__type(key, __u32);
	__type(value, __u32);
} tb_lossless SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS * NCLASS);
	__type(key, __u32);
	__type(value, struct qcfg);
} tb_qcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS * NCLASS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct qstate);
} tb_qstate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS * NDSCP);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct dscp_stats);
} tb_dscp_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS * NCLASS);
	__type(key, __u32);
	__type(value, struct pfc_cfg);
} tb_pfc_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS * NCLASS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ingress);
} tb_inq SEC(".maps");

/* A plain hash, not an LRU one: an LRU map may evict entries long before it is full, and an
 * evicted entry is a packet whose ingress bytes are never given back. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pkt_key);
	__type(value, struct pkt_val);
} tb_pkts SEC(".maps");

/* per port: 1 + its rate's index in the link-rate table of the telemetry records
 * (int_wire.h); 0: the port writes none */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tb_int_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} tb_events SEC(".maps");

struct parsed {
	__u32 cls;
	__u32 dscp;
	__u8 tos;
	__u8 is_ip;
	__u8 kick;
	__u16 l4;              /* offset of the transport header */
	struct pkt_key key;
};

static __always_inline void parse(struct __sk_buff *skb, struct parsed *p)
{
	__u16 proto = 0;
	struct iphdr ip;

	p->cls = 0;
	p->is_ip = 0;
	p->kick = 0;
	if (bpf_skb_load_bytes(skb, 12, &proto, 2) < 0)
		return;
	if (proto == bpf_htons(ETH_P_TB_KICK))
		p->kick = 1;
	if (proto != bpf_htons(ETH_P_IP))
		return;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0)
		return;
	p->is_ip = 1;
	p->tos = ip.tos;
	__u32 dscp = ip.tos >> 2;
	p->dscp = dscp;
	__u32 *cls = bpf_map_lookup_elem(&tb_dscp, &dscp);
	if (cls && *cls < NCLASS)
		p->cls = *cls;
	p->key.saddr = ip.saddr;
	p->key.daddr = ip.daddr;
	p->key.ip_id = ip.id;
	p->key.proto = ip.protocol;
	p->l4 = ETH_HLEN + ip.ihl * 4;
	if (ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) {
		__u32 ports = 0;
		bpf_skb_load_bytes(skb, ETH_HLEN + ip.ihl * 4, &ports, 4);
		p->key.sport = ports & 0xffff;
		p->key.dport = ports >> 16;
	}
}

static __always_inline void emit(__u32 kind, __u32 rx_port, __u32 tx_port, __u32 cls,
				 struct ingress *in, __u64 now)
{
	struct event ev = {
		.ns = now, .xoff_ns = in->xoff_ns, .last_arrival_ns = in->last_arrival_ns,
		.bytes_after_xoff = in->bytes_after_xoff, .kind = kind, .rx_port = rx_port,
		.tx_port = tx_port, .cls = cls, .bytes = in->bytes,
	};
	/* Wake the executor for every event: the default (adaptive) notification skips
	 * records posted while it is still handling earlier ones. */
	bpf_ringbuf_output(&tb_events, &ev, sizeof(ev), BPF_RB_FORCE_WAKEUP);
}

static __always_inline int is_lossless(__u32 cls)
{
	__u32 *l = bpf_map_lookup_elem(&tb_lossless, &cls);
	return l && *l;
}

/* The packet left switch `sw` (or was dropped there): release its ingress accounting.
 * OVS reads a switch port through a packet tap, which the kernel serves before the tc
 * ingress hook: on the other core a packet can be forwarded and reach the next hop before
 * its arrival was accounted here. Its departure then leaves a tombstone, and the late
 * arrival finds it and accounts nothing. */
static __always_inline void release(struct parsed *p, __u32 sw, __u32 tx_port, __u64 now)
{
	struct pkt_key key = p->key;
	key.sw = sw;
	struct pkt_val *v = bpf_map_lookup_elem(&tb_pkts, &key);
	if (!v) {
		struct pkt_val tomb = { .slot = PKT_TOMBSTONE };
		if (bpf_map_update_elem(&tb_pkts, &key, &tomb, BPF_NOEXIST) == 0)
			return;
		/* the arrival was accounted between our lookup and the tombstone: release it */
		v = bpf_map_lookup_elem(&tb_pkts, &key);
		if (!v)
			return;
	}
	__u32 slot = v->slot;
	if (slot == PKT_TOMBSTONE)
		return;
	__s64 len = v->len;
	bpf_map_delete_elem(&tb_pkts, &key);
	struct ingress *in = bpf_map_lookup_elem(&tb_inq, &slot);
	struct pfc_cfg *pc = bpf_map_lookup_elem(&tb_pfc_cfg, &slot);
	if (!in || !pc)
		return;
	__sync_fetch_and_add(&in->bytes, -len);
	if (in->paused && in->bytes <= pc->xon_bytes &&
	    __sync_val_compare_and_swap(&in->paused, 1, 0) == 1) {
		in->paused_ns += now - in->xoff_ns;
		emit(EV_XON, slot / NCLASS, tx_port, slot % NCLASS, in, now);
	}
}

#define ROCE_PORT 4791
#define BTH_LEN 12

/* A RoCE data packet with room for telemetry leaves switch port `port`: its next record,
 * with what the port has sent and holds before it (int_wire.h). Only for a UDP checksum
 * of zero, as RoCEv2 sends (the record is not covered by a checksum). */
static __always_inline void int_push(struct __sk_buff *skb, struct parsed *p, __u32 port)
{
	__u32 *ri = bpf_map_lookup_elem(&tb_int_rate, &port);
	if (!ri || !*ri)
		return;
	__u32 bth = p->l4 + 8;
	__u8 op = 0xff, flag = 0, nhop = INT_MAX_HOPS;
	__u16 csum = 1;
	bpf_skb_load_bytes(skb, bth, &op, 1);
	bpf_skb_load_bytes(skb, bth + 4, &flag, 1);
	bpf_skb_load_bytes(skb, p->l4 + 6, &csum, 2);
	if (op > 0x0b || !(flag & INT_BTH_FLAG) || csum != 0)
		return;              /* not RC SEND/WRITE data with an area; or checksummed */
	__u32 area = bth + BTH_LEN;
	if (bpf_skb_load_bytes(skb, area + 1, &nhop, 1) < 0 || nhop >= INT_MAX_HOPS)
		return;
	__s64 queued = 0;
	__u64 enq = 0;
	for (__u32 c = 0; c < NCLASS; c++) {
		__u32 s = port * NCLASS + c;
		struct qstate *q = bpf_map_lookup_elem(&tb_qstate, &s);
		if (q) {
			queued += q->bytes;
			enq += q->enq_bytes;
		}
	}
	if (queued < 0)
		queued = 0;
	__u64 hop = bpf_cpu_to_be64(INT_HOP(*ri - 1, bpf_ktime_get_ns(), enq - queued, queued));
	bpf_skb_store_bytes(skb, area + INT_HDR_LEN + nhop * INT_HOP_LEN, &hop, INT_HOP_LEN, 0);
	nhop++;
	bpf_skb_store_bytes(skb, area + 1, &nhop, 1, 0);
}

static __always_inline void if_key_of(struct __sk_buff *skb, int host, int mac_offset,
				      struct if_key *ik)
{
	ik->mac = 0;
	ik->ifindex = 0;
	ik->pad = 0;
	if (host)
		bpf_skb_load_bytes(skb, mac_offset, &ik->mac, 6);
	else
		ik->ifindex = skb->ifindex;
}

static __always_inline int egress(struct __sk_buff *skb, int host)
{
	struct if_key ik;
	if_key_of(skb, host, 6, &ik);
	struct port_cfg *pc = bpf_map_lookup_elem(&tb_port_cfg, &ik);
	if (!pc)
		return TC_ACT_OK;
	struct parsed p = {};
	parse(skb, &p);
	skb->priority = (pc->htb_major << 16) | (0x10 + p.cls);
	if (p.kick) {
		__u32 kslot = pc->port * NCLASS;
		struct qstate *kq = bpf_map_lookup_elem(&tb_qstate, &kslot);
		if (kq)
			__sync_fetch_and_add(&kq->kicks, 1);
		return TC_ACT_OK;
	}

	__u32 slot = pc->port * NCLASS + p.cls;
	__u32 dslot = pc->port * NDSCP + (p.dscp & (NDSCP - 1));
	struct qcfg *qc = bpf_map_lookup_elem(&tb_qcfg, &slot);
	struct qstate *q = bpf_map_lookup_elem(&tb_qstate, &slot);
	struct dscp_stats *ds = bpf_map_lookup_elem(&tb_dscp_stats, &dslot);
	if (!qc || !q || !ds)
		return TC_ACT_OK;
	if (p.is_ip && pc->sw != NONE && is_lossless(p.cls)) {
		/* a packet whose ingress overflowed its headroom: the tc ingress hook cannot
		 * stop OVS from reading it, so it is dropped here, on its way out */
		struct pkt_key key = p.key;
		key.sw = pc->sw;
		struct pkt_val *v = bpf_map_lookup_elem(&tb_pkts, &key);
		if (v && (v->flags & PKT_DROP)) {
			release(&p, pc->sw, pc->port, bpf_ktime_get_ns());
			__sync_fetch_and_add(&q->drops, 1);
			__sync_fetch_and_add(&ds->drops, 1);
			return TC_ACT_STOLEN;
		}
	}
	/* wire_len: the bytes on the wire once a GSO packet of the host stack is segmented
	 * (headers counted per segment), which is what the far end will see. */
	__s64 len = skb->wire_len ? skb->wire_len : skb->len;
	__s64 segs = skb->gso_segs > 1 ? skb->gso_segs : 1;  /* a host stack may hand over GSO */
	if ((qc->limit_pkts && q->pkts + segs > qc->limit_pkts) ||
	    (qc->limit_bytes && q->bytes + len > qc->limit_bytes)) {
		__sync_fetch_and_add(&q->drops, 1);
		__sync_fetch_and_add(&ds->drops, 1);
		/* A host's full NIC queue pushes back on its TCP (local congestion, as with a real
		 * qdisc); a switch drops silently. */
		return (pc->flags & PORT_HOST) ? TC_ACT_SHOT : TC_ACT_STOLEN;
	}
	if (p.is_ip && qc->ecn_mode != ECN_OFF && q->bytes > qc->kmin_bytes) {
		int mark = 1;
		if (qc->ecn_mode == ECN_RED && q->bytes < qc->kmax_bytes) {
			__u64 span = qc->kmax_bytes - qc->kmin_bytes;
			__u64 ppm = span ? (__u64)qc->pmax_ppm * (q->bytes - qc->kmin_bytes) / span : 0;
			mark = (bpf_get_prandom_u32() % 1000000) < ppm;
		}
		if (mark) {
			if ((p.tos & 3) == 0) {
				__sync_fetch_and_add(&q->not_ect_over_k, 1);
			} else if ((p.tos & 3) != 3) {
				__u16 old = 0, new;
				bpf_skb_load_bytes(skb, ETH_HLEN, &old, 2);
				new = old | bpf_htons(3);
				bpf_l3_csum_replace(skb, ETH_HLEN + 10, old, new, 2);
				bpf_skb_store_bytes(skb, ETH_HLEN, &new, 2, 0);
				__sync_fetch_and_add(&q->marks, 1);
				__sync_fetch_and_add(&ds->marks, 1);
			}
		}
	}
	if (pc->sw != NONE && p.is_ip && p.key.proto == IPPROTO_UDP &&
	    p.key.dport == bpf_htons(ROCE_PORT))
		int_push(skb, &p, pc->port);
	__sync_fetch_and_add(&q->pkts, segs);
	__sync_fetch_and_add(&q->bytes, len);
	__sync_fetch_and_add(&q->enq_pkts, segs);
	__sync_fetch_and_add(&q->enq_bytes, len);
	__sync_fetch_and_add(&ds->enq_pkts, segs);
	__sync_fetch_and_add(&ds->enq_bytes, len);
	return TC_ACT_OK;
}

static __always_inline int ingress(struct __sk_buff *skb, int host)
{
	struct if_key ik;
	if_key_of(skb, host, 0, &ik);
	struct rx_cfg *rc = bpf_map_lookup_elem(&tb_rx_cfg, &ik);
	if (!rc)
		return TC_ACT_OK;
	struct parsed p = {};
	parse(skb, &p);
	if (p.kick)
		return TC_ACT_SHOT;
	__s64 len = skb->len;
	__u64 now = bpf_ktime_get_ns();

	__u32 slot = rc->tx_port * NCLASS + p.cls;
	struct qstate *q = bpf_map_lookup_elem(&tb_qstate, &slot);
	if (q) {
		__sync_fetch_and_add(&q->pkts, -1);
		__sync_fetch_and_add(&q->bytes, -len);
		__sync_fetch_and_add(&q->deq_pkts, 1);
	}
	if (!p.is_ip)
		return TC_ACT_OK;
	if (rc->tx_switch != NONE && is_lossless(p.cls))
		release(&p, rc->tx_switch, rc->tx_port, now);
	if (rc->rx_switch == NONE)
		return TC_ACT_OK;

	__u32 islot = rc->rx_port * NCLASS + p.cls;
	struct pfc_cfg *pc = bpf_map_lookup_elem(&tb_pfc_cfg, &islot);
	struct ingress *in = bpf_map_lookup_elem(&tb_inq, &islot);
	if (!pc || !in || !pc->enabled)
		return TC_ACT_OK;
	struct pkt_key key = p.key;
	key.sw = rc->rx_switch;
	struct pkt_val v = { .slot = islot, .len = len };
	if (in->paused) {
		__sync_fetch_and_add(&in->bytes_after_xoff, len);
		in->last_arrival_ns = now;
		if (in->bytes + len > (__s64)pc->xoff_bytes + pc->headroom_bytes) {
			emit(EV_OVERFLOW, rc->rx_port, rc->tx_port, p.cls, in, now);
			v.flags = PKT_DROP;
		}
	}
	if (bpf_map_update_elem(&tb_pkts, &key, &v, BPF_NOEXIST) != 0) {
		/* An overflowing packet that is not recorded cannot be dropped at the egress:
		 * it is counted as escaped, not as dropped, so drops stay exact. */
		if (v.flags & PKT_DROP)
			__sync_fetch_and_add(&in->overflow_escaped, 1);
		struct pkt_val *old = bpf_map_lookup_elem(&tb_pkts, &key);
		if (old && old->slot == PKT_TOMBSTONE) {
			/* it has left already: OVS read it from the tap before this hook ran */
			bpf_map_delete_elem(&tb_pkts, &key);
			return TC_ACT_OK;
		}
		/* the same packet twice in this switch, or the table full: not accounted, so
		 * that nothing is released twice (counted, and reported by the monitor) */
		__sync_fetch_and_add(&in->untracked, 1);
		return TC_ACT_OK;
	}
	if (v.flags & PKT_DROP)
		__sync_fetch_and_add(&in->overflow_drops, 1);
	__sync_fetch_and_add(&in->bytes, len);
	if (!in->paused && in->bytes > pc->xoff_bytes &&
	    __sync_val_compare_and_swap(&in->paused, 0, 1) == 0) {
		in->xoff_ns = now;
		in->bytes_after_xoff = 0;
		in->last_arrival_ns = now;
		__sync_fetch_and_add(&in->pauses, 1);
		emit(EV_XOFF, rc->rx_port, rc->tx_port, p.cls, in, now);
		/* The other CPU may have released bytes below XON between our add and the flag:
		 * it saw no pause to end, so end it here (the executor's watchdog is the backstop). */
		if (in->bytes <= pc->xon_bytes &&
		    __sync_val_compare_and_swap(&in->paused, 1, 0) == 1) {
			in->paused_ns += now - in->xoff_ns;
			emit(EV_XON, rc->rx_port, rc->tx_port, p.cls, in, now);
		}
	}
	return TC_ACT_OK;
}

/* VNI of a link between servers -> this server's port of it (the transmitter) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tb_vni SEC(".maps");

#define VXLAN_PORT 4789
#define VXLAN_HLEN 8
#define UDP_HLEN 8

/* egress of the server's network device: a VXLAN packet of a fabric link has left that
 * link's queue (HTB dequeued it to the VXLAN device, which encapsulated it): the dequeue of
 * its inner frame, in this kernel's maps. */
SEC("tc")
int tb_underlay(struct __sk_buff *skb)
{
	__u16 proto = 0, dport = 0, inner_proto = 0;
	struct iphdr ip;
	__u32 vx = 0;
	__u8 tos = 0;

	if (bpf_skb_load_bytes(skb, 12, &proto, 2) < 0 || proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0 || ip.protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	__u32 udp = ETH_HLEN + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, udp + 2, &dport, 2) < 0 || dport != bpf_htons(VXLAN_PORT))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, udp + UDP_HLEN + 4, &vx, 4) < 0)
		return TC_ACT_OK;
	__u32 vni = bpf_ntohl(vx) >> 8;
	__u32 *port = bpf_map_lookup_elem(&tb_vni, &vni);
	if (!port)
		return TC_ACT_OK;
	__u32 inner = udp + UDP_HLEN + VXLAN_HLEN;
	if (bpf_skb_load_bytes(skb, inner + 12, &inner_proto, 2) < 0 ||
	    inner_proto == bpf_htons(ETH_P_TB_KICK))  /* never counted as queued */
		return TC_ACT_OK;
	__u32 cls = 0;
	if (inner_proto == bpf_htons(ETH_P_IP) &&
	    bpf_skb_load_bytes(skb, inner + ETH_HLEN + 1, &tos, 1) == 0) {
		__u32 dscp = tos >> 2;
		__u32 *c = bpf_map_lookup_elem(&tb_dscp, &dscp);
		if (c && *c < NCLASS)
			cls = *c;
	}
	__u32 slot = *port * NCLASS + cls;
	struct qstate *q = bpf_map_lookup_elem(&tb_qstate, &slot);
	if (q) {
		__sync_fetch_and_add(&q->pkts, -1);
		__sync_fetch_and_add(&q->bytes, -(__s64)(skb->len - inner));
		__sync_fetch_and_add(&q->deq_pkts, 1);
	}
	return TC_ACT_OK;
}

SEC("tc")
int tb_egress(struct __sk_buff *skb) { return egress(skb, 0); }

SEC("tc")
int tb_ingress(struct __sk_buff *skb) { return ingress(skb, 0); }

SEC("tc")
int tb_egress_host(struct __sk_buff *skb) { return egress(skb, 1); }

SEC("tc")
int tb_ingress_host(struct __sk_buff *skb) { return ingress(skb, 1); }


char LICENSE[] SEC("license") = "GPL";

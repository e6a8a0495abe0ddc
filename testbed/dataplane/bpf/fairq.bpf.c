// SPDX-License-Identifier: GPL-2.0
/*
 * Flow-fair host NIC queue (links.host_queue: fair; testbed/dataplane/queues.py): the classifier
 * of a host NIC's HTB, which has one class per bucket under the link's class. Each flow (the
 * kernel's flow hash, on the 5-tuple) gets a bucket of its own, handed out round robin as
 * flows appear, so that flows share the NIC round robin as under fq or fq_codel (the default
 * qdisc of many Linux servers, which this kernel lacks) without SFQ's hash collisions: two
 * flows share a bucket only when FAIR_BUCKETS others appeared between them. Without it a
 * relaying server's NIC is one FIFO in which forwarded packets crowd out the server's own
 * flow (docs/FIDELITY.md, the relay effect).
 *
 * A classic (not direct-action) cls_bpf program: the return value is the HTB class id. Each
 * NIC's filter loads its own copy, with its own maps. FAIR_MAJOR, FAIR_FIRST_MINOR and
 * FAIR_BUCKETS come from the loader (-D, dataplane.py).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#ifndef FAIR_MAJOR
#error "FAIR_MAJOR, FAIR_FIRST_MINOR and FAIR_BUCKETS are set by testbed/dataplane/queues.py"
#endif

struct {                       /* flow hash -> its bucket; the least recently seen go first */
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} fair_flows SEC(".maps");

struct {                       /* the bucket the next new flow gets */
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fair_next SEC(".maps");

SEC("classifier")
int fair_bucket(struct __sk_buff *skb)
{
	__u32 hash = bpf_get_hash_recalc(skb);
	__u32 zero = 0, bucket;
	__u32 *known = bpf_map_lookup_elem(&fair_flows, &hash);

	if (!known) {
		__u32 *next = bpf_map_lookup_elem(&fair_next, &zero);

		if (!next)
			return (FAIR_MAJOR << 16) | FAIR_FIRST_MINOR;
		bucket = __sync_fetch_and_add(next, 1) % FAIR_BUCKETS;
		/* two CPUs may see the flow's first packets at once: the first entry wins */
		bpf_map_update_elem(&fair_flows, &hash, &bucket, BPF_NOEXIST);
		known = bpf_map_lookup_elem(&fair_flows, &hash);
	}
	bucket = known ? *known % FAIR_BUCKETS : 0;
	return (FAIR_MAJOR << 16) | (FAIR_FIRST_MINOR + bucket);
}

char _license[] SEC("license") = "GPL";

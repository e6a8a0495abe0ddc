/* In-band network telemetry on RoCE data packets, as HPCC's code carries it
 * (alibaba-edu/High-Precision-Congestion-Control, simulation/src/network/model/int-header.h):
 * the sender reserves room for INT_MAX_HOPS records and marks the packet; every switch
 * egress port it leaves fills the next record; the receiver echoes the whole area in its ACK.
 *
 *   BTH byte 4, bit INT_BTH_FLAG (one of BTH's reserved bits): the area follows the BTH
 *   area: byte 0 reserved, byte 1 the number of records filled, then INT_MAX_HOPS records
 *   record (64 bits, big-endian): rate index 3 | time 24 | tx bytes 20 | queue 17
 *     rate index: into the link-rate table both ends are given (HPCC: 25..400 Gb/s)
 *     time:       the switch's clock when it took the packet, in 2^INT_TIME_SHIFT ns
 *     tx bytes:   the port's bytes sent before this packet, in 2^INT_BYTES_SHIFT bytes
 *     queue:      the port's bytes queued (all classes), in INT_QLEN_UNIT bytes, saturating
 *   the counters wrap; a reader takes differences modulo their width.
 *
 * Macros only: the switch's BPF program (tbqos.bpf.c) and the RoCE engine both include it. */
#ifndef INT_WIRE_H
#define INT_WIRE_H

#define INT_BTH_FLAG 0x20
#define INT_MAX_HOPS 5
#define INT_HDR_LEN 2
#define INT_HOP_LEN 8
#define INT_LEN (INT_HDR_LEN + INT_MAX_HOPS * INT_HOP_LEN)   /* 42, as HPCC's */
#define INT_RATE_BITS 3
#define INT_TIME_BITS 24
#define INT_BYTES_BITS 20
#define INT_QLEN_BITS 17
#define INT_TIME_SHIFT 7         /* 128 ns */
#define INT_BYTES_SHIFT 7        /* 128 bytes */
#define INT_QLEN_UNIT 80         /* bytes, as HPCC's */

#define INT_MASK(bits) ((1ull << (bits)) - 1)
#define INT_HOP(rate, time_ns, tx_bytes, qlen_bytes)                                      \
	(((unsigned long long)(rate) & INT_MASK(INT_RATE_BITS)) << 61 |                   \
	 (((unsigned long long)(time_ns) >> INT_TIME_SHIFT) & INT_MASK(INT_TIME_BITS)) << 37 | \
	 (((unsigned long long)(tx_bytes) >> INT_BYTES_SHIFT) & INT_MASK(INT_BYTES_BITS)) << 17 | \
	 ((unsigned long long)(qlen_bytes) / INT_QLEN_UNIT > INT_MASK(INT_QLEN_BITS) ?       \
		  INT_MASK(INT_QLEN_BITS) : (unsigned long long)(qlen_bytes) / INT_QLEN_UNIT))
#define INT_HOP_RATE(h) ((unsigned)((h) >> 61))
#define INT_HOP_TIME(h) ((unsigned)(((h) >> 37) & INT_MASK(INT_TIME_BITS)))
#define INT_HOP_BYTES(h) ((unsigned)(((h) >> 17) & INT_MASK(INT_BYTES_BITS)))
#define INT_HOP_QLEN(h) ((unsigned)((h) & INT_MASK(INT_QLEN_BITS)))

#endif

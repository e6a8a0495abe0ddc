/* RoCEv2's wire format as the engine speaks it (IBTA Annex A17; the kernel's rxe driver,
 * include/rdma/ib_pack.h, for the field layout): the UDP payload is a base transport
 * header (BTH, 12 bytes), an AETH (4 bytes) on acknowledgements, the payload, and a
 * 4-byte ICRC. The ICRC is carried as zeros: nothing on the path checks it. With HPCC,
 * data packets carry room for the switches' telemetry after the BTH and ACKs echo it after
 * the AETH, flagged in a reserved bit of the BTH (int_wire.h).
 *
 * Plain C on fixed-size integers, no I/O, so that the unit tests compile and call the very
 * functions the engine uses. */
#ifndef ROCE_WIRE_H
#define ROCE_WIRE_H

#include <stdint.h>
#include <string.h>

#include "../../dataplane/bpf/int_wire.h"

#define ROCE_UDP_PORT 4791
#define ROCE_BTH_LEN 12
#define ROCE_AETH_LEN 4
#define ROCE_ICRC_LEN 4
#define ROCE_CNP_PAD 16              /* a CNP: BTH, 16 reserved bytes, ICRC */
#define ROCE_PSN_MASK 0xffffffu

/* RC opcodes (ib_pack.h IB_OPCODE_RC_*), and the CNP's */
#define OP_SEND_FIRST 0x00
#define OP_SEND_MIDDLE 0x01
#define OP_SEND_LAST 0x02
#define OP_SEND_ONLY 0x04
#define OP_WRITE_FIRST 0x06
#define OP_WRITE_MIDDLE 0x07
#define OP_WRITE_LAST 0x08
#define OP_WRITE_ONLY 0x0a
#define OP_ACK 0x11
#define OP_CNP 0x81

/* AETH syndromes: bits 7-5 the type */
#define AETH_ACK 0x1f                /* ACK, unlimited credits (what rxe sends) */
#define AETH_NAK_PSN_SEQ 0x60        /* NAK: PSN sequence error */

#define BTH_BECN 0x40                /* in byte 4 */
#define BTH_ACKREQ 0x80              /* in byte 8 */

struct bth {
	uint8_t opcode;
	uint8_t becn;
	uint8_t intf;                /* telemetry follows the BTH (data) or the AETH (ACK) */
	uint8_t ackreq;
	uint32_t dest_qp;            /* 24 bits */
	uint32_t psn;                /* 24 bits */
};

static inline void put_be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)v;
}

static inline uint32_t get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

/* BTH into p[0..11]: opcode, SE/M/pad/TVer 0, P_Key 0xffff, BECN, DestQP, AckReq, PSN */
static inline void bth_put(uint8_t *p, const struct bth *h)
{
	p[0] = h->opcode;
	p[1] = 0;
	p[2] = 0xff;
	p[3] = 0xff;
	p[4] = (h->becn ? BTH_BECN : 0) | (h->intf ? INT_BTH_FLAG : 0);
	put_be24(p + 5, h->dest_qp & ROCE_PSN_MASK);
	p[8] = h->ackreq ? BTH_ACKREQ : 0;
	put_be24(p + 9, h->psn & ROCE_PSN_MASK);
}

/* 0 on success, -1 when the buffer cannot hold a BTH or the transport version is not 0 */
static inline int bth_get(const uint8_t *p, size_t len, struct bth *h)
{
	if (len < ROCE_BTH_LEN || (p[1] & 0x0f) != 0)
		return -1;
	h->opcode = p[0];
	h->becn = (p[4] & BTH_BECN) != 0;
	h->intf = (p[4] & INT_BTH_FLAG) != 0;
	h->dest_qp = get_be24(p + 5);
	h->ackreq = (p[8] & BTH_ACKREQ) != 0;
	h->psn = get_be24(p + 9);
	return 0;
}

/* an AETH: syndrome, then the 24-bit message sequence number */
static inline void aeth_put(uint8_t *p, uint8_t syndrome, uint32_t msn)
{
	p[0] = syndrome;
	put_be24(p + 1, msn);
}

/* The signed distance from b to a in the 24-bit PSN space (rxe's psn_compare). */
static inline int32_t psn_diff(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}

/* The 32-bit sequence a 24-bit wire PSN stands for, as the one nearest `near`. */
static inline uint32_t psn_unwrap(uint32_t wire, uint32_t near)
{
	return near + (uint32_t)psn_diff(wire, near & ROCE_PSN_MASK);
}

static inline int op_is_data(uint8_t op)
{
	return op <= OP_SEND_ONLY || (op >= OP_WRITE_FIRST && op <= OP_WRITE_ONLY);
}

/* The opcode of packet `i` (from 0) of an `n`-packet WRITE. */
static inline uint8_t write_opcode(uint32_t i, uint32_t n)
{
	if (n == 1)
		return OP_WRITE_ONLY;
	if (i == 0)
		return OP_WRITE_FIRST;
	return i + 1 == n ? OP_WRITE_LAST : OP_WRITE_MIDDLE;
}

#endif

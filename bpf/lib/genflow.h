/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* genflow.h - what the flow generator (bpf/testbed/xdp_genflow.c) shares with
 * internal/testbed/gen: one scheduled frame, a payload template and the
 * run state through which the kernel reports frames it did not send. */
#ifndef TW_GENFLOW_H
#define TW_GENFLOW_H

#include <linux/types.h>

/* Payload bytes rewritten on every frame (see xdp_genflow.c): the largest
 * application template plus the 12 bytes by which a UDP header is shorter
 * than a TCP one. */
#define TW_GF_TMAX 512
#define TW_GF_REGION (TW_GF_TMAX + 12)
/* Frames handed to XDP_TX whose fate the kernel has not reported yet. The
 * kernel flushes its transmit bulk every 16 frames and at the end of every
 * 64-frame test-run batch, so 256 is never reached. */
#define TW_GF_FIFO 256

enum tw_gf_info {
	TW_GF_S2C = 1, /* server to client, else client to server */
	TW_GF_UDP = 2, /* else TCP */
};

/* One scheduled frame: the 5-tuple derives from the flow index and the
 * generator's constants; everything that varies per frame is here. */
struct tw_gf_pkt {
	__u32 flow;  /* flow index */
	__u32 seq;   /* TCP sequence number of the sender */
	__u32 ack;   /* TCP acknowledgement number */
	__u16 iplen; /* bytes from the IP header on */
	__u16 sport; /* the server's port */
	__u8 tcp_flags;
	__u8 info; /* enum tw_gf_info */
	__u8 pl;   /* payload template */
	__u8 _pad;
	__u32 _pad2; /* array elements are 8-byte aligned in mmap'ed memory */
};
_Static_assert(sizeof(struct tw_gf_pkt) == 24, "tw_gf_pkt is 24 bytes");

/* A payload template: its bytes, zero-padded to the region, and their
 * ones'-complement sum so no frame sums its payload. */
struct tw_gf_payload {
	__u32 sum; /* 16-bit words, big-endian, folded */
	__u32 len;
	__u8 b[TW_GF_REGION];
};
_Static_assert(sizeof(struct tw_gf_payload) == 8 + TW_GF_REGION,
	       "tw_gf_payload is unpadded");

/* One test run's state, set by user space before the run and read after.
 * The XDP program and the two tracepoint programs all run on the thread
 * doing the test run, one after the other, so nothing here is atomic. */
struct tw_gf_state {
	__u64 tid;   /* bpf_get_current_pid_tgid() of that thread */
	__u32 n;     /* scheduled frames */
	__u32 seq;   /* next scheduled frame */
	__u32 ndrop; /* entries in tw_gf_drops */
	__u32 qhead; /* FIFO of frames returned as XDP_TX, not yet flushed */
	__u32 qtail;
	__u32 xmit_drops;    /* refused by the driver (ndo_xdp_xmit) */
	__u32 redirect_errs; /* refused before queueing (xdp_redirect_err) */
	__u32 lost;          /* events the FIFO could not explain */
	__u32 q[TW_GF_FIFO];
};

#endif

// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_gen.c - tierwall's traffic generator. Run with BPF_PROG_TEST_RUN in
 * live-frames mode (BPF_F_TEST_XDP_LIVE_FRAMES): every repetition rewrites
 * the template frame's source address and returns XDP_TX, so the kernel
 * transmits it out of the given interface as an xdp_frame (the technique of
 * xdp-trafficgen, ~10x what skb-based senders reach here).
 *
 * Live-frame pages are recycled without re-initialisation, so nothing may
 * be updated incrementally from what the packet holds: the checksums are
 * recomputed each time from bases user space computed with a zero source,
 * and the template's headers are written back first, since an XDP program
 * downstream on veth may have rewritten the page in place (a SYN proxy
 * turns a SYN into its SYN-ACK: the next frame sent from that page was
 * the SYN-ACK with the SYN's length, malformed at the victim).
 *
 * On the lab the generator is also the end of the wire: with tw_gen_card
 * set it runs the emulated NIC's match table (nic.h, the NIC stage's own
 * maps) on each frame it builds, and a frame the table drops never
 * leaves, as a card drops it before the host. Dropped at the wire's
 * veth instead, every such page went back to the generator's page pool
 * through the ring whose lock the host's CPU takes for every frame it
 * frees: the card's drops slowed the host (docs/EVALUATION.md). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "../lib/types.h"
#include "../lib/nic.h"

/* Headers of the template rewritten every frame: Ethernet, IPv6 and TCP. */
#define TW_GEN_HDR_MAX 96

enum tw_gen_mode {
	TW_GEN_SAMPLES = 0, /* sources from the sample table, in order */
	TW_GEN_SPOOF = 1,   /* random sources inside a prefix */
};

struct tw_gen_config {
	enum tw_gen_mode mode;
	__u32 family;  /* 4 or 6 */
	__u32 ip_csum; /* IPv4 header checksum with a zero source (host order) */
	__u32 l4_csum; /* UDP/TCP checksum with a zero source (host order) */
	__u32 l4_csum_off; /* offset of the L4 checksum in the frame */
	__u32 udp;         /* 1: a zero UDP checksum is sent as 0xffff */
	__u32 spoof_len;   /* spoof: prefix length of the random sources */
	__u32 hdr_len;     /* bytes of hdr, the template's first ones */
	__u32 card_l3len;  /* the frame's IP length, as the card counts */
	__u8 spoof_base[16];
	__u8 hdr[TW_GEN_HDR_MAX];
	/* The card's key of every frame, its source left zero. */
	struct tw_nic_key card_key;
};

struct tw_gen_addr {
	__u8 a[16];
};

volatile const __u32 tw_gen_mask = 0; /* samples - 1, a power of two */
volatile const __u32 tw_gen_card = 0; /* 1: the NIC's table runs here */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_gen_config);
	__uint(max_entries, 1);
} tw_gen_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_gen_addr);
	__uint(max_entries, 1);
} tw_gen_samples SEC(".maps");

/* Per-CPU: the next sample, the frames this CPU put on the wire, how
 * many of those the card's table dropped (not transmitted), the
 * repetitions that sent or dropped a frame, the repetitions left over
 * once the frames had run out (spare: each an XDP_DROP), and where to
 * stop: no frame once sent reaches stop (0: no limit), set by user space
 * per run. */
struct tw_gen_state {
	__u64 seq;
	__u64 sent;
	__u64 card_drop;
	__u64 runs;
	__u64 stop;
	__u64 spare;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_gen_state);
	__uint(max_entries, 1);
} tw_gen_st SEC(".maps");

static __always_inline __u16 tw_csum_add(__u32 base, const __u8 *a, int n)
{
	/* ~(~base + sum of the address's 16-bit words), end-around carry. */
	__u32 s = (~base) & 0xffff;
	for (int i = 0; i < n; i += 2)
		s += (__u32)a[i] << 8 | a[i + 1];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s & 0xffff;
}

/* The card's verdict on a frame from src: 1 when its table drops it.
 * The lookup runs whatever the mode, as on the wire's NIC program: a
 * hardware match stage costs the same per packet whatever it finds. */
static __always_inline int tw_gen_card_drops(struct tw_gen_config *cfg,
					     const struct tw_gen_addr *src)
{
	__u32 zero = 0;
	struct tw_nic_config *nc = bpf_map_lookup_elem(&tw_nic_cfg, &zero);
	struct tw_nic_key k = cfg->card_key;
	__builtin_memcpy(k.src, src->a, 16);
	struct tw_nic_rule *r = tw_nic_lookup(nc, &k);
	if (!r || !nc || !(nc->flags & TW_NIC_F_TABLE) ||
	    r->action != TW_NIC_DROP)
		return 0;
	tw_nic_count(&tw_nic_ctr, r->id, cfg->card_l3len);
	tw_nic_count(&tw_nic_stats, TW_NV_HIT_DROP, cfg->card_l3len);
	return 1;
}

static __always_inline void tw_put16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

/* The next frame's source: the next sample, or a random one in the
 * spoofed prefix. */
static __always_inline int tw_gen_pick(struct tw_gen_config *cfg,
				       struct tw_gen_state *st,
				       struct tw_gen_addr *src)
{
	if (cfg->mode == TW_GEN_SPOOF) {
		__builtin_memcpy(src->a, cfg->spoof_base, 16);
		/* Randomise the host bits after the prefix. */
		__u32 r[4] = { bpf_get_prandom_u32(), bpf_get_prandom_u32(),
			       bpf_get_prandom_u32(), bpf_get_prandom_u32() };
		__u32 n = cfg->family == 4 ? 4 : 16;
		for (__u32 i = 0; i < 16; i++) {
			if (i >= n)
				break;
			__u32 bit = i * 8;
			__u8 mask = 0;
			if (bit + 8 <= cfg->spoof_len)
				mask = 0xff;
			else if (bit < cfg->spoof_len)
				mask = (__u8)(0xff
					      << (8 - (cfg->spoof_len - bit)));
			__u8 rb = ((__u8 *)r)[i & 15];
			src->a[i] = (src->a[i] & mask) | (rb & ~mask);
		}
	} else {
		__u32 idx = st->seq & tw_gen_mask;
		struct tw_gen_addr *s =
			bpf_map_lookup_elem(&tw_gen_samples, &idx);
		if (!s)
			return -1;
		*src = *s;
	}
	st->seq++;
	return 0;
}

/* Writes src and the checksums it changes into the frame. */
static __always_inline int tw_gen_write(__u8 *data, __u8 *data_end,
					struct tw_gen_config *cfg,
					const struct tw_gen_addr *src)
{
	if (cfg->family == 4) {
		if (data + 14 + 20 > data_end)
			return -1;
		__builtin_memcpy(data + 14 + 12, src->a, 4);
		tw_put16(data + 14 + 10, tw_csum_add(cfg->ip_csum, src->a, 4));
		__u32 off = cfg->l4_csum_off;
		if (off > 200)
			return -1;
		if (data + off + 2 > data_end)
			return -1;
		__u16 c = tw_csum_add(cfg->l4_csum, src->a, 4);
		if (cfg->udp && c == 0)
			c = 0xffff;
		tw_put16(data + off, c);
	} else {
		if (data + 14 + 40 > data_end)
			return -1;
		__builtin_memcpy(data + 14 + 8, src->a, 16);
		__u32 off = cfg->l4_csum_off;
		if (off > 200)
			return -1;
		if (data + off + 2 > data_end)
			return -1;
		__u16 c = tw_csum_add(cfg->l4_csum, src->a, 16);
		if (cfg->udp && c == 0)
			c = 0xffff;
		tw_put16(data + off, c);
	}
	return 0;
}

/* Builds the next frame in the page: 0 when it goes out, 1 when the
 * card dropped it, -1 on a broken configuration. A global function: the
 * verifier checks it once, not once per frame of tw_gen's loop (cfg and
 * st arrive as sized memory it may not trust to be non-NULL). */
__noinline int tw_gen_frame(struct xdp_md *ctx, struct tw_gen_config *cfg,
			    struct tw_gen_state *st)
{
	if (!ctx || !cfg || !st)
		return -1;
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	struct tw_gen_addr src = {};
	if (tw_gen_pick(cfg, st, &src) < 0)
		return -1;
	if (tw_gen_write(data, data_end, cfg, &src) < 0)
		return -1;
	st->sent++;
	if (tw_gen_card && tw_gen_card_drops(cfg, &src)) {
		st->card_drop++;
		return 1;
	}
	return 0;
}

/* Frames the card may drop in one repetition of the test run. */
#define TW_GEN_CARD_RUN 32

SEC("xdp")
int tw_gen(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct tw_gen_config *cfg = bpf_map_lookup_elem(&tw_gen_cfg, &zero);
	struct tw_gen_state *st = bpf_map_lookup_elem(&tw_gen_st, &zero);
	if (!cfg || !st)
		return XDP_ABORTED;

	for (__u32 i = 0; i < TW_GEN_HDR_MAX; i++) {
		if (i >= cfg->hdr_len || data + i + 1 > data_end)
			break;
		data[i] = cfg->hdr[i];
	}

	/* A frame the card drops was built, counted and dropped, and the
	 * repetition goes on to the next frame in the same page: the page
	 * leaves only with a frame for the host. An XDP_DROP here would
	 * free it through the page pool's ring under the lock the host's
	 * CPU takes for every frame it frees (live-frames runs free with
	 * "no direct" set), and the card's drops would slow the host. */
	for (__u32 i = 0; i < TW_GEN_CARD_RUN; i++) {
		if (st->stop && st->sent >= st->stop) {
			st->spare++;
			return XDP_DROP; /* the run's frames are all out */
		}
		int r = tw_gen_frame(ctx, cfg, st);
		if (r < 0)
			return XDP_ABORTED;
		if (r == 0) {
			st->runs++;
			return XDP_TX;
		}
	}
	st->runs++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";

// SPDX-License-Identifier: GPL-2.0-only
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
 * the SYN-ACK with the SYN's length, malformed at the victim). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

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
	__u8 spoof_base[16];
	__u8 hdr[TW_GEN_HDR_MAX];
};

struct tw_gen_addr {
	__u8 a[16];
};

volatile const __u32 tw_gen_mask = 0; /* samples - 1, a power of two */

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

/* Per-CPU: the next sample, and the frames this CPU transmitted. */
struct tw_gen_state {
	__u64 seq;
	__u64 sent;
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

static __always_inline void tw_put16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

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

	struct tw_gen_addr src = {};
	if (cfg->mode == TW_GEN_SPOOF) {
		__builtin_memcpy(src.a, cfg->spoof_base, 16);
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
			src.a[i] = (src.a[i] & mask) | (rb & ~mask);
		}
	} else {
		__u32 idx = st->seq & tw_gen_mask;
		struct tw_gen_addr *s =
			bpf_map_lookup_elem(&tw_gen_samples, &idx);
		if (!s)
			return XDP_ABORTED;
		src = *s;
	}
	st->seq++;

	if (cfg->family == 4) {
		if (data + 14 + 20 > data_end)
			return XDP_ABORTED;
		__builtin_memcpy(data + 14 + 12, src.a, 4);
		tw_put16(data + 14 + 10, tw_csum_add(cfg->ip_csum, src.a, 4));
		__u32 off = cfg->l4_csum_off;
		if (off > 200)
			return XDP_ABORTED;
		if (data + off + 2 > data_end)
			return XDP_ABORTED;
		__u16 c = tw_csum_add(cfg->l4_csum, src.a, 4);
		if (cfg->udp && c == 0)
			c = 0xffff;
		tw_put16(data + off, c);
	} else {
		if (data + 14 + 40 > data_end)
			return XDP_ABORTED;
		__builtin_memcpy(data + 14 + 8, src.a, 16);
		__u32 off = cfg->l4_csum_off;
		if (off > 200)
			return XDP_ABORTED;
		if (data + off + 2 > data_end)
			return XDP_ABORTED;
		__u16 c = tw_csum_add(cfg->l4_csum, src.a, 16);
		if (cfg->udp && c == 0)
			c = 0xffff;
		tw_put16(data + off, c);
	}
	st->sent++;
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";

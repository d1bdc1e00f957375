// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_filter.c - tierwall's software tier: drop packets whose source is on
 * the blocklist (exact /32 and /128 first, then prefixes), let allowlisted
 * sources through whatever else matches, then apply the flow rules (by
 * destination and packet shape, for floods whose sources cannot be
 * listed), and count what passes into the feature buffers for detection;
 * SYNs that no list or rule decided, from sources with no proof, are held
 * to the SYN guard's budget. An IPv4-mapped IPv6 source is checked and counted as the IPv4 address it
 * carries. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/maps.h"
#include "../lib/parse.h"
#include "../lib/table.h"
#include "../lib/stats.h"
#include "../lib/frule.h"
#include "../lib/features.h"
#include "../lib/sample.h"
#include "../lib/heavy.h"
#include "../lib/synguard.h"

/* The parser as two global functions, which the verifier checks once
 * each, on their own: the filter then continues from one state whatever
 * the path through the headers (VLAN depth, IPv6 extension chain, fragment
 * state), instead of being verified again for every one of them (inlined,
 * that was half the verifier's limit before the flow rules, and over it
 * with them). The IP layer takes its header's offset as a number: inside
 * one function, every VLAN depth was a different constant offset and the
 * whole IP parser was verified once per depth (the parser was 45% of the
 * filter's 557K processed instructions). */
__noinline int tw_filter_parse_l3(struct xdp_md *ctx, struct tw_pkt *p,
				  __u32 off, __u32 proto)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (!p)
		return TW_R_ETH_TRUNC;
	/* At most the Ethernet header and TW_MAX_VLAN tags: 22 bytes. */
	return tw_parse_l3(data + tw_bound(off, 0x1f), data_end, p,
			   (__be16)proto);
}

__noinline int tw_filter_parse(struct xdp_md *ctx, struct tw_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (!p)
		return TW_R_ETH_TRUNC;
	__be16 proto;
	void *l3;
	int r = tw_parse_eth(data, data_end, p, &proto, &l3);
	if (r != TW_R_PASS)
		return r;
	r = tw_filter_parse_l3(ctx, p, p->l3off, proto);
	if (r == TW_R_PASS)
		tw_unmap(p);
	return r;
}

/* The IPv4 source lists: the allowlist first, then the exact blocklist.
 * Returns the verdict reason, TW_R_PASS when neither has the source. */
static __always_inline int tw_lists4(struct tw_config *cfg, __u32 src,
				     __u32 cpu, __u32 len)
{
	if (cfg->allow4_n) {
		struct tw_lpm4_key k = { .prefixlen = 32, .addr = src };
		if (tw_lpm_hit(&tw_allow4, &k, &tw_allow_ctr, tw_allow_cap, cpu,
			       len))
			return TW_R_ALLOW;
	}
	if (cfg->exact4_n && tw_exact4_hit(src, cfg->seed, len))
		return TW_R_DROP_EXACT;
	return TW_R_PASS;
}

SEC("xdp")
int tw_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	__u32 cpu = bpf_get_smp_processor_id();
	struct tw_pkt p;
	int r;

	/* A plain IPv4 frame has its source lists asked before the full
	 * parser (tags, IPv6 extension headers, the L4 fields the later
	 * stages read, and the zeroing of the struct it fills): a flood from
	 * listed sources is dropped for what the lists cost and little
	 * more. The verdict is the one the full path gives, which asks the
	 * same lists in the same order once the parser has accepted the
	 * frame, as it accepts every plain one. */
	__u32 src4;
	int listed = 0;
	if (cfg && tw_plain4(data, data_end, &src4)) {
		r = tw_lists4(cfg, src4, cpu, len);
		if (r == TW_R_ALLOW)
			return tw_verdict(r, len);
		if (r != TW_R_PASS)
			return tw_exit(ctx, r, len);
		listed = 1;
	}

	__builtin_memset(&p, 0, sizeof(p));
	r = tw_filter_parse(ctx, &p);
	if (r != TW_R_PASS)
		return tw_exit(ctx, r, len);
	if (!cfg)
		return tw_verdict(TW_R_PASS, len);

	if (p.family == 4) {
		if (!listed) {
			r = tw_lists4(cfg, p.src4, cpu, len);
			if (r == TW_R_ALLOW)
				return tw_verdict(r, len);
			if (r != TW_R_PASS)
				return tw_exit(ctx, r, len);
		}
		if (cfg->pfx4_n) {
			struct tw_lpm4_key k = { .prefixlen = 32,
						 .addr = p.src4 };
			if (tw_lpm_hit(&tw_pfx4, &k, &tw_pfx_ctr, tw_pfx_cap,
				       cpu, len))
				return tw_exit(ctx, TW_R_DROP_PREFIX, len);
		}
		/* A mapped source is still on an IPv6 packet: an IPv6 prefix
		 * that covers ::ffff:0:0/96 (::/0 to ::/80) blocks it too. The
		 * IPv6 allowlist does not pass it: only IPv4 entries can. */
		if (p.mapped && cfg->pfx6_n) {
			struct tw_lpm6_key k = { .prefixlen = 128 };
			__builtin_memcpy(k.addr, p.src6, 16);
			if (tw_lpm_hit(&tw_pfx6, &k, &tw_pfx_ctr, tw_pfx_cap,
				       cpu, len))
				return tw_exit(ctx, TW_R_DROP_PREFIX, len);
		}
	} else {
		struct tw_lpm6_key k = { .prefixlen = 128 };
		__builtin_memcpy(k.addr, p.src6, 16);
		if (cfg->allow6_n && tw_lpm_hit(&tw_allow6, &k, &tw_allow_ctr,
						tw_allow_cap, cpu, len))
			return tw_verdict(TW_R_ALLOW, len);
		if (cfg->exact6_n && tw_exact6_hit(p.src6, cfg->seed, len))
			return tw_exit(ctx, TW_R_DROP_EXACT, len);
		if (cfg->pfx6_n &&
		    tw_lpm_hit(&tw_pfx6, &k, &tw_pfx_ctr, tw_pfx_cap, cpu, len))
			return tw_exit(ctx, TW_R_DROP_PREFIX, len);
	}

	/* Sources the heavy-hitter detector caught, before the daemon has
	 * seen them (heavy.h); a monitor-only catch passes on, marked. */
	struct tw_hh_pre hh = {};
	int prov = tw_hh_provisional(&p, len, &hh, !cfg->frule_n);
	if (prov == TW_R_DROP_PROVISIONAL)
		return tw_exit(ctx, prov, len);

	r = TW_R_PASS;
	if (cfg->frule_n) {
		r = tw_flow_rules(ctx, &p, len, cpu, cfg);
		if (tw_action(r) == XDP_DROP)
			return tw_exit(ctx, r, len);
	}
	if (r == TW_R_PASS) {
		if (prov == TW_R_PASS && !hh.counted && (hh.sampled || p.syn))
			tw_hh_observe(&p, &hh);
		else if (prov == TW_R_PASS_PROVISIONAL)
			r = prov;
	}
	if (cfg->features)
		tw_features(&p, len, cpu, cfg->feat_seed);
	/* After the features: what the guard drops, the detector still
	 * counts, and its rule then takes the flood ahead of the guard. */
	if (r == TW_R_PASS && p.syn && cfg->syn_guard)
		r = tw_syn_guard(ctx, &p, cfg);
	return tw_exit(ctx, r, len);
}

char _license[] SEC("license") = "Dual BSD/GPL";

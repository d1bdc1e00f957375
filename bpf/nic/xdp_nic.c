// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_nic.c - the emulated SmartNIC: a bump-in-the-wire stage on the
 * wire-facing port of the "nic" network namespace. Packets matching its
 * small exact-match table are dropped (or counted and forwarded) here and
 * never reach the host; everything else is redirected to the host-facing
 * port, where the host's XDP filter sees it. Byte counters count from the
 * IP header on, as real NICs' hardware counters exclude L2. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/parse.h"
#include "../lib/nic.h"
#include "../lib/nic_cpu.h"
#include "../lib/fmatch.h"

static __always_inline int tw_nic_out(struct tw_nic_config *cfg, __u32 v,
				      __u32 bytes)
{
	tw_nic_count(&tw_nic_stats, v, bytes);
	if (!cfg || !cfg->host_ifindex)
		return XDP_PASS;
	int r = bpf_redirect(cfg->host_ifindex, 0);
	if (r != XDP_REDIRECT) {
		tw_nic_count(&tw_nic_stats, TW_NV_TX_ERROR, bytes);
		return XDP_DROP;
	}
	return r;
}

/* The NIC CPU is slower than the host: at most cpu_rate_pps packets per
 * second reach the filter there, split evenly over the CPUs (per-CPU
 * buckets: no atomics), with a 1 ms burst. */
static __always_inline int tw_nic_cpu_admit(struct tw_nic_config *cfg)
{
	if (!cfg->cpu_rate_pps)
		return 1;
	__u32 zero = 0;
	struct tw_nic_bucket *b = bpf_map_lookup_elem(&tw_nic_bucket, &zero);
	if (!b)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 per_cpu = cfg->cpu_rate_pps / (tw_nic_ncpu ? tw_nic_ncpu : 1);
	if (!per_cpu)
		per_cpu = 1;
	__u64 burst = 1000000000ULL * (per_cpu / 1000 + 1);
	__u64 dt = now - b->last_ns;
	b->last_ns = now;
	/* dt * per_cpu overflows after ~5 s at 1 Mpps: clamp dt first. */
	if (dt > 1000000000ULL)
		dt = 1000000000ULL;
	__u64 credit = b->credit + dt * per_cpu;
	if (credit > burst)
		credit = burst;
	if (credit < 1000000000ULL) {
		b->credit = credit;
		return 0;
	}
	b->credit = credit - 1000000000ULL;
	return 1;
}

/* Hands the packet to the filter on the NIC CPU; returns only when that
 * is not possible (no filter loaded, or over the CPU's rate). */
static __always_inline int tw_nic_to_cpu(struct xdp_md *ctx,
					 struct tw_nic_config *cfg, __u32 bytes)
{
	if (!tw_nic_cpu_admit(cfg)) {
		tw_nic_count(&tw_nic_stats, TW_NV_CPU_OVERLOAD, bytes);
		return XDP_DROP;
	}
	tw_nic_count(&tw_nic_stats, TW_NV_CPU, bytes);
	bpf_tail_call(ctx, &tw_nic_cpu, 0);
	/* Slot empty (filter not loaded yet): forward unfiltered, counted. */
	return tw_nic_out(cfg, TW_NV_MISS, bytes);
}

/* A global function: the verifier checks it once, on its own; inlined,
 * every parse outcome multiplied the paths after it and the program
 * crossed the verifier's 1M-instruction limit. */
__noinline int tw_nic_parse(struct xdp_md *ctx, struct tw_pkt *p)
{
	if (!ctx || !p)
		return TW_R_ETH_TRUNC;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	return tw_parse(data, data_end, p);
}

/* The policers' verdict for a packet the table missed: 1 to drop, 0 to
 * pass it on (no policer matched, or its rate admitted it). A global
 * function, verified once on its own, as the filter's rule scan is. */
__noinline int tw_nic_police(const struct tw_pkt *p)
{
	__u32 zero = 0;
	if (!p)
		return 0;
	void *bank = bpf_map_lookup_elem(&tw_nic_pol, &zero);
	if (!bank)
		return 0;
	const struct tw_nic_pol_set *set = bpf_map_lookup_elem(bank, &zero);
	if (!set)
		return 0;
	struct tw_fview v = {};
	tw_fview_init(&v, p);
	for (__u32 i = 0; i < TW_NIC_POL_MAX; i++) {
		const struct tw_frule *r = &set->rule[i];
		if (r->action == TW_FA_END)
			break;
		if (!tw_frule_match(r, &v))
			continue;
		__u32 k = r->id;
		struct tw_fctr *c = bpf_map_lookup_elem(&tw_nic_pol_ctr, &k);
		if (c) {
			c->packets++;
			c->bytes += v.l3len;
		}
		if (r->action == TW_FA_RATE) {
			struct tw_fbucket *b =
				bpf_map_lookup_elem(&tw_nic_pol_tb, &k);
			if (b && tw_rate_take(b, r->rate_pps, tw_nic_ncpu))
				return 0;
		} else if (r->action != TW_FA_DROP) {
			return 0;
		}
		if (c)
			c->dropped++;
		return 1;
	}
	return 0;
}

SEC("xdp")
int tw_nic(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tw_pkt p = {};
	__u32 zero = 0;
	struct tw_nic_config *cfg = bpf_map_lookup_elem(&tw_nic_cfg, &zero);

	int cpu_path = cfg && (cfg->flags & TW_NIC_F_CPU);
	if (tw_nic_parse(ctx, &p) != TW_R_PASS) {
		/* The filter's malformed-packet policy applies on the NIC CPU. */
		if (cpu_path)
			return tw_nic_to_cpu(ctx, cfg, data_end - data);
		return tw_nic_out(cfg, TW_NV_UNHANDLED, data_end - data);
	}
	struct tw_nic_key k = { .family = p.family };
	if (p.family == 4) {
		__builtin_memcpy(k.src, &p.src4, 4);
		__builtin_memcpy(k.dst, &p.dst4, 4);
	} else {
		__builtin_memcpy(k.src, p.src6, 16);
		__builtin_memcpy(k.dst, p.dst6, 16);
	}
	k.proto = p.proto;
	k.sport = p.sport;
	k.dport = p.dport;
	struct tw_nic_rule *r = tw_nic_lookup(cfg, &k);
	/* Without the table (modes wire and nic) the lookup above still runs
	 * and its answer is ignored: a hardware match stage costs the same
	 * per packet whatever it finds, so the NIC stage's capacity, which
	 * the lab takes as its line rate, is the same in every mode. */
	if (cfg && !(cfg->flags & TW_NIC_F_TABLE))
		r = NULL;
	if (!r) {
		if (cfg && (cfg->flags & TW_NIC_F_TABLE) && cfg->pol_n &&
		    tw_nic_police(&p)) {
			tw_nic_count(&tw_nic_stats, TW_NV_HIT_DROP, p.l3len);
			return XDP_DROP;
		}
		if (cpu_path)
			return tw_nic_to_cpu(ctx, cfg, p.l3len);
		return tw_nic_out(cfg, TW_NV_MISS, p.l3len);
	}

	tw_nic_count(&tw_nic_ctr, r->id, p.l3len);
	if (r->action == TW_NIC_DROP) {
		tw_nic_count(&tw_nic_stats, TW_NV_HIT_DROP, p.l3len);
		return XDP_DROP;
	}
	return tw_nic_out(cfg, TW_NV_HIT_FORWARD, p.l3len);
}

char _license[] SEC("license") = "Dual BSD/GPL";

/* SPDX-License-Identifier: GPL-2.0-only */
/* heavy.h - the heavy-hitter detector: a source that matched no rule and
 * sends more than a threshold of packets (or SYNs) in a window of a few
 * milliseconds is dropped from its next packet, through a provisional
 * entry that expires by itself, and reported to the daemon, which
 * confirms it as a ban or revokes it. The daemon's rails stay in charge:
 * allowlisted sources never get here, protected and known-good ones are
 * never caught.
 *
 * Why a per-CPU count-min sketch: its memory and per-packet cost are
 * fixed whatever the number of sources (millions of spoofed ones cannot
 * grow it), and per CPU it needs no atomics. It is blocked: a source's two
 * counters share one cache line, so counting costs one miss. A source
 * spread by RSS over every CPU is still seen at its full rate: when one
 * CPU's estimate reaches the threshold divided by the CPU count, which
 * some CPU's must when the sum reaches the threshold, the other CPUs'
 * lines (CPU-major in one array) are read and summed. Counts only overestimate, so a
 * heavy source is never missed; an innocent one sharing both counters
 * with heavy ones is caught only until the daemon revokes it. */
#ifndef TW_HEAVY_H
#define TW_HEAVY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"
#include "table.h"

/* Types user space needs that no map or program signature names (the
 * event goes through a ring buffer, the enums through bytes): BTF only
 * describes those, so bpf2go -type would not find these without this
 * anchor (a constant in .rodata, never read). */
struct tw_hh_btf {
	struct tw_hh_event event;
	enum tw_hh_kind kind;
	enum tw_prov_flag flag;
	enum tw_hh_limit limit;
};
const struct tw_hh_btf tw_hh_btf_anchor __attribute__((unused));

/* The key of a source: IPv4 in the first word, IPv6 masked to the
 * configured prefix. */
struct tw_hh_key {
	__u32 w[4];
};

static __always_inline __u32 tw_hh_mask(__u32 bits, __u32 word)
{
	__u32 lo = word * 32;
	if (bits <= lo)
		return 0;
	if (bits >= lo + 32)
		return 0xffffffff;
	return bpf_htonl(0xffffffff << (32 - (bits - lo)));
}

static __always_inline void tw_hh_key_of(const struct tw_pkt *p,
					 const struct tw_hh_config *c,
					 struct tw_hh_key *k)
{
	if (p->family == 4) {
		k->w[0] = p->src4;
		return;
	}
	k->w[0] = p->src6[0] & tw_hh_mask(c->prefix6, 0);
	k->w[1] = p->src6[1] & tw_hh_mask(c->prefix6, 1);
	k->w[2] = p->src6[2] & tw_hh_mask(c->prefix6, 2);
	k->w[3] = p->src6[3] & tw_hh_mask(c->prefix6, 3);
}

static __always_inline struct tw_hh_stats *tw_hh_stats_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&tw_hh_ctr, &zero);
}

/* What the provisional check worked out for a packet, handed on to
 * tw_hh_observe so that it is worked out once: the clock and the
 * source's hash. on is 0 when the detector was off. */
struct tw_hh_pre {
	__u64 jiffies;
	__u32 h;
	__u32 on;
};

static __always_inline __u32 tw_hh_hash(const struct tw_pkt *p,
					const struct tw_hh_config *c,
					const struct tw_hh_key *k)
{
	return p->family == 4 ? tw_hash4(k->w[0], c->seed) :
				tw_hash6(k->w, c->seed);
}

/* The line from the low bits, the two slots from the next ones: the
 * second differs from the first (no modulo: a division). */
static __always_inline __u32 tw_hh_line_of(__u32 h)
{
	return h & (TW_HH_LINES - 1);
}

static __always_inline __u32 tw_hh_s0(__u32 h)
{
	return (h >> 12) & (TW_HH_SLOTS - 1);
}

static __always_inline __u32 tw_hh_s1(__u32 h)
{
	return tw_hh_s0(h) ^ (1 + ((h >> 14) & 1));
}

static __always_inline struct tw_hh_line *tw_hh_line_get(__u32 cpu, __u32 line)
{
	__u32 idx = cpu * TW_HH_LINES + line;
	return bpf_map_lookup_elem(&tw_hh_sketch, &idx);
}

/* A mark holds until its jiffies (low 32 bits, compared across the wrap). */
static __always_inline int tw_hh_marked(__u32 live, __u32 j)
{
	return (__s32)(live - j) >= 0;
}

/* tw_hh_provisional: the provisional check, before the flow rules. Returns
 * TW_R_DROP_PROVISIONAL or TW_R_PASS_PROVISIONAL for a caught source,
 * TW_R_MAX for one the daemon revoked (passes, and is not counted again),
 * else TW_R_PASS. A global function: verified once, on its own. */
__noinline int tw_hh_provisional(struct tw_pkt *p, __u32 len,
				 struct tw_hh_pre *pre)
{
	__u32 zero = 0;
	if (!p || !pre)
		return TW_R_PASS;
	pre->on = 0;
	struct tw_hh_config *c = bpf_map_lookup_elem(&tw_hh_cfg, &zero);
	if (!c || !c->window_ns)
		return TW_R_PASS;
	struct tw_hh_key k = {};
	tw_hh_key_of(p, c, &k);
	__u32 h = tw_hh_hash(p, c, &k);
	__u64 j = bpf_jiffies64();
	pre->jiffies = j;
	pre->h = h;
	pre->on = 1;
	/* Only a source whose two counters a catch marked can have an entry
	 * the data plane made (one the daemon made, a revocation, is for a
	 * source that passes anyway, and a catch it refuses with EEXIST). */
	struct tw_hh_line *l =
		tw_hh_line_get(bpf_get_smp_processor_id(), tw_hh_line_of(h));
	if (!l)
		return TW_R_PASS;
	if (!tw_hh_marked(l->b[tw_hh_s0(h)].live, j) ||
	    !tw_hh_marked(l->b[tw_hh_s1(h)].live, j))
		return TW_R_PASS;

	struct tw_hh_stats *st = tw_hh_stats_get();
	if (st)
		st->marked++;
	void *map = p->family == 4 ? (void *)&tw_prov4 : (void *)&tw_prov6;
	struct tw_prov *v = bpf_map_lookup_elem(map, &k);
	if (!v)
		return TW_R_PASS;
	__u64 now = bpf_ktime_get_ns();
	if (now >= v->expires_ns) {
		if (bpf_map_delete_elem(map, &k) == 0 && st)
			st->expired++;
		return TW_R_PASS;
	}
	if (v->flags & TW_PROV_REVOKED)
		return TW_R_MAX;
	/* An IPv6 entry holds a whole prefix: a known-good client inside
	 * it keeps passing while its neighbours flood. */
	if (p->family == 6 && bpf_map_lookup_elem(&tw_good6, p->src6))
		return TW_R_MAX;
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->bytes, len);
	if (v->flags & TW_PROV_MONITOR)
		return TW_R_PASS_PROVISIONAL;
	return TW_R_DROP_PROVISIONAL;
}

static __always_inline void tw_hh_bump(struct tw_hh_bucket *b, __u32 win,
				       __u8 syn)
{
	if (b->win != win) {
		b->win = win;
		b->pkts = 0;
		b->syns = 0;
	}
	b->pkts++;
	b->syns += syn;
}

/* Every CPU's count of a source's two counters, this window. */
static __always_inline void tw_hh_sum(__u32 line, __u32 s0, __u32 s1, __u32 win,
				      __u32 *pkts, __u32 *syns)
{
	__u64 p0 = 0, p1 = 0, y0 = 0, y1 = 0;
	for (__u32 cpu = 0; cpu < TW_HH_MAX_CPUS; cpu++) {
		if (cpu >= tw_nr_cpus)
			break;
		struct tw_hh_line *l = tw_hh_line_get(cpu, line);
		if (!l)
			break;
		if (l->b[s0 & (TW_HH_SLOTS - 1)].win == win) {
			p0 += l->b[s0 & (TW_HH_SLOTS - 1)].pkts;
			y0 += l->b[s0 & (TW_HH_SLOTS - 1)].syns;
		}
		if (l->b[s1 & (TW_HH_SLOTS - 1)].win == win) {
			p1 += l->b[s1 & (TW_HH_SLOTS - 1)].pkts;
			y1 += l->b[s1 & (TW_HH_SLOTS - 1)].syns;
		}
	}
	__u64 pm = p0 < p1 ? p0 : p1, sm = y0 < y1 ? y0 : y1;
	*pkts = pm > 0xffffffff ? 0xffffffff : pm;
	*syns = sm > 0xffffffff ? 0xffffffff : sm;
}

/* Marks a caught source's two counters on every CPU's line until the
 * entry's end (a later mark already there stays: the marks of the sources
 * sharing a counter only ever move forward). A CPU racing to count there
 * writes other fields of the bucket, never live. */
static __always_inline void tw_hh_mark(__u32 line, __u32 s0, __u32 s1,
				       __u32 until)
{
	for (__u32 cpu = 0; cpu < TW_HH_MAX_CPUS; cpu++) {
		if (cpu >= tw_nr_cpus)
			break;
		struct tw_hh_line *l = tw_hh_line_get(cpu, line);
		if (!l)
			break;
		struct tw_hh_bucket *b0 = &l->b[s0 & (TW_HH_SLOTS - 1)];
		struct tw_hh_bucket *b1 = &l->b[s1 & (TW_HH_SLOTS - 1)];
		if ((__s32)(until - b0->live) > 0)
			*(volatile __u32 *)&b0->live = until;
		if ((__s32)(until - b1->live) > 0)
			*(volatile __u32 *)&b1->live = until;
	}
}

static __always_inline int tw_hh_exempt(const struct tw_pkt *p,
					struct tw_hh_stats *st)
{
	if (p->family == 4) {
		struct tw_lpm4_key pk = { .prefixlen = 32, .addr = p->src4 };
		if (bpf_map_lookup_elem(&tw_protect4, &pk)) {
			if (st)
				st->exempt_protect++;
			return 1;
		}
		if (bpf_map_lookup_elem(&tw_good4, &p->src4)) {
			if (st)
				st->exempt_good++;
			return 1;
		}
		return 0;
	}
	struct tw_lpm6_key pk = { .prefixlen = 128 };
	__builtin_memcpy(pk.addr, p->src6, 16);
	if (bpf_map_lookup_elem(&tw_protect6, &pk)) {
		if (st)
			st->exempt_protect++;
		return 1;
	}
	if (bpf_map_lookup_elem(&tw_good6, p->src6)) {
		if (st)
			st->exempt_good++;
		return 1;
	}
	return 0;
}

/* Makes the provisional entry, marks it in the sketch and reports it; an
 * entry already there (caught on another CPU meanwhile, or revoked by the
 * daemon) stays. The precise clock here, once a catch: the entry's times
 * are the daemon's and the detect→drop benchmark's. */
static __always_inline void tw_hh_catch(const struct tw_pkt *p,
					const struct tw_hh_config *c, __u32 h,
					__u64 j, __u8 kind, __u32 count)
{
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (tw_hh_exempt(p, st))
		return;
	struct tw_hh_key k = {};
	tw_hh_key_of(p, c, &k);
	__u64 now = bpf_ktime_get_ns();
	struct tw_prov v = {
		.added_ns = now,
		.expires_ns = now + c->ttl_ns,
		.count = count,
		.kind = kind,
		.flags = c->monitor ? TW_PROV_MONITOR : 0,
	};
	void *map = p->family == 4 ? (void *)&tw_prov4 : (void *)&tw_prov6;
	long err = bpf_map_update_elem(map, &k, &v, BPF_NOEXIST);
	if (err == -17 /* EEXIST */)
		return;
	if (err) {
		if (st)
			st->table_full++;
		return;
	}
	tw_hh_mark(tw_hh_line_of(h), tw_hh_s0(h), tw_hh_s1(h),
		   (__u32)j + c->ttl_ticks);
	if (st)
		st->caught++;
	struct tw_hh_event *e =
		bpf_ringbuf_reserve(&tw_hh_events, sizeof(*e), 0);
	if (!e) {
		if (st)
			st->ring_full++;
		return;
	}
	__builtin_memcpy(e->addr, k.w, 16);
	e->family = p->family;
	e->kind = kind;
	e->prefix = p->family == 4 ? 32 : c->prefix6;
	e->flags = v.flags;
	e->count = count;
	e->at_ns = now;
	bpf_ringbuf_submit(e, 0);
}

/* tw_hh_observe counts a packet that no rule decided and catches its
 * source when it is over a threshold, from what tw_hh_provisional worked
 * out (pre). A global function, as tw_hh_provisional. */
__noinline int tw_hh_observe(struct tw_pkt *p, struct tw_hh_pre *pre)
{
	__u32 zero = 0;
	if (!p || !pre || !pre->on)
		return 0;
	struct tw_hh_config *c = bpf_map_lookup_elem(&tw_hh_cfg, &zero);
	if (!c || !c->window_ns)
		return 0;
	__u32 win = pre->jiffies >> (c->tick_shift & 63);
	__u32 h = pre->h;
	__u32 line = tw_hh_line_of(h), s0 = tw_hh_s0(h), s1 = tw_hh_s1(h);
	struct tw_hh_line *l = tw_hh_line_get(bpf_get_smp_processor_id(), line);
	if (!l)
		return 0;
	struct tw_hh_bucket *b0 = &l->b[s0], *b1 = &l->b[s1];
	tw_hh_bump(b0, win, p->syn);
	tw_hh_bump(b1, win, p->syn);
	__u32 pe = b0->pkts < b1->pkts ? b0->pkts : b1->pkts;
	__u32 se = b0->syns < b1->syns ? b0->syns : b1->syns;
	/* Over the local threshold: sum the CPUs, at its crossing and then
	 * every eighth packet, so a source that stays between the local
	 * and the global threshold costs little more than the others. */
	int due = (pe >= c->pkt_local && !((pe - c->pkt_local) & 7)) ||
		  (p->syn && se >= c->syn_local && !((se - c->syn_local) & 7));
	if (!due)
		return 0;
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (st)
		st->checks++;
	tw_hh_sum(line, s0, s1, win, &pe, &se);
	if (pe >= c->pkt_thresh)
		tw_hh_catch(p, c, h, pre->jiffies, TW_HH_PACKETS, pe);
	else if (se >= c->syn_thresh)
		tw_hh_catch(p, c, h, pre->jiffies, TW_HH_SYNS, se);
	return 0;
}

#endif

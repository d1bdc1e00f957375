/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
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
 * lines (CPU-major in one array) are read and summed. Counts only
 * overestimate, so a heavy source is never missed.
 *
 * What a clean packet costs is what this file is shaped by (issue 17: at
 * most +15 ns over the detector off). On these hosts every helper call
 * returns through the SRSO safe-RET thunk: bpf_ktime_get_ns cost ~36 ns,
 * bpf_ktime_get_coarse_ns ~17, bpf_get_prandom_u32 ~16, where
 * bpf_jiffies64 and the map lookups here are inlined loads; and writing
 * the sketch's line cost ~10-14 ns more than reading it. So: the clock is
 * jiffies (windows of whole ticks); at high thresholds the sketch counts
 * only a random 1 in 2^sample_shift packets, and what it finds is a
 * candidate, counted exactly before it can be caught (so sampling noise
 * catches no source under its threshold, and an innocent source sharing
 * both counters with heavy ones is not caught either); and the
 * provisional table is looked up only for a source whose two marks (a
 * small table shared by the CPUs, tw_hh_live) a catch or a candidate set,
 * and only while a mark can be live. */
#ifndef TW_HEAVY_H
#define TW_HEAVY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "verifier.h"
#include "maps.h"
#include "parse.h"
#include "table.h"
#include "goodsieve.h"

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
 * tw_hh_observe so that it is worked out once: the clock, the source's
 * hash if the check needed it (hashed), and whether the sketch counts the
 * packet, so that the filter calls tw_hh_observe (a call costs here) only
 * for a packet it has work for. on is 0 when the detector was off. */
struct tw_hh_pre {
	__u64 jiffies;
	__u32 h;
	__u8 on;
	__u8 hashed;
	__u8 sampled; /* the sketch counts this packet (tw_hh_sampled) */
	__u8 counted; /* tw_hh_provisional counted it already */
};

static __always_inline __u32 tw_hh_hash(const struct tw_pkt *p,
					const struct tw_hh_config *c)
{
	struct tw_hh_key k = {};
	tw_hh_key_of(p, c, &k);
	return p->family == 4 ? tw_hash4(k.w[0], c->seed) :
				tw_hash6(k.w, c->seed);
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
	/* Masked again, a no-op the barrier keeps: 6.1's verifier does not
	 * bound an xor, and this indexes a map value. */
	return tw_bound(tw_hh_s0(h) ^ (1 + ((h >> 14) & 1)), TW_HH_SLOTS - 1);
}

static __always_inline struct tw_hh_line *tw_hh_line_get(__u32 cpu, __u32 line)
{
	__u32 idx = cpu * TW_HH_LINES + line;
	return bpf_map_lookup_elem(&tw_hh_sketch, &idx);
}

/* A source's marks: a line of tw_hh_marks from bits the sketch does not
 * use, two different slots in it from the next ones. */
static __always_inline struct tw_hh_marks *tw_hh_marks_get(__u32 h)
{
	__u32 idx = (h >> 16) & (TW_HH_MARK_LINES - 1);
	return bpf_map_lookup_elem(&tw_hh_live, &idx);
}

static __always_inline __u32 tw_hh_m0(__u32 h)
{
	return (h >> 25) & (TW_HH_MARK_SLOTS - 1);
}

static __always_inline __u32 tw_hh_m1(__u32 h)
{
	return tw_bound(tw_hh_m0(h) ^ (1 + ((h >> 29) & 7)),
			TW_HH_MARK_SLOTS - 1); /* as tw_hh_s1 */
}

/* The longest a mark lasts, in ticks: a catch's TTL or a candidate's
 * three windows (tw_hh_add), whichever is longer. */
static __always_inline __u32 tw_hh_span(const struct tw_hh_config *c)
{
	__u32 cand = (3U << (c->tick_shift & 31)) + 2;
	return c->ttl_ticks > cand ? c->ttl_ticks : cand;
}

/* A mark holds until its jiffies (low 32 bits): it is live while it lies
 * at most one span ahead of now. A mark never set is 0 and never live; a
 * signed comparison alone would take it (and any mark 2^31 ticks old) as
 * live whenever the low 32 bits of jiffies are at or past 2^31, which is
 * the first five minutes after every boot (INITIAL_JIFFIES) and then half
 * of every 2^32-tick cycle. */
static __always_inline int tw_hh_marked(__u32 live, __u32 j, __u32 span)
{
	return live != 0 && live - j <= span;
}

static __always_inline __u32 tw_hh_win(const struct tw_hh_config *c, __u64 j)
{
	return j >> (c->tick_shift & 63);
}

/* The provisional-table entry of the packet's source, if its marks let it
 * have one (NULL otherwise); k receives the key. */
static __always_inline struct tw_prov *
tw_hh_prov_get(const struct tw_pkt *p, const struct tw_hh_config *c,
	       struct tw_hh_pre *pre, struct tw_hh_key *k, void **map)
{
	__u32 zero = 0;
	__u64 j = pre->jiffies;
	/* No mark live anywhere (nothing caught or watched lately): the
	 * common case, one shared word, mostly read. */
	struct tw_hh_state *s = bpf_map_lookup_elem(&tw_hh_shared, &zero);
	if (!s || (__s64)(s->marks_until - j) < 0)
		return NULL;
	tw_hh_key_of(p, c, k);
	__u32 h = p->family == 4 ? tw_hash4(k->w[0], c->seed) :
				   tw_hash6(k->w, c->seed);
	pre->h = h;
	pre->hashed = 1;
	/* Only a source whose two marks a catch or a candidate set can have
	 * an entry the data plane made (one the daemon made, a revocation,
	 * is for a source that passes anyway, and a catch it refuses with
	 * EEXIST). */
	struct tw_hh_marks *m = tw_hh_marks_get(h);
	__u32 span = tw_hh_span(c);
	if (!m || !tw_hh_marked(m->until[tw_hh_m0(h)], j, span) ||
	    !tw_hh_marked(m->until[tw_hh_m1(h)], j, span))
		return NULL;
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (st)
		st->marked++;
	*map = p->family == 4 ? (void *)&tw_prov4 : (void *)&tw_prov6;
	return bpf_map_lookup_elem(*map, k);
}

/* Marks a source until j + life (a later live mark already there stays:
 * the marks of the sources sharing one only ever move forward), and the
 * shared word that says a mark may be live. A mark is never 0, which
 * means "never set". */
static __always_inline void tw_hh_mark(const struct tw_hh_config *c, __u32 h,
				       __u64 j, __u32 life)
{
	__u32 zero = 0;
	__u32 until = (__u32)j + life;
	__u64 until64 = j + life;
	until |= until == 0; /* one tick longer, once in 2^32 */
	struct tw_hh_marks *m = tw_hh_marks_get(h);
	if (m) {
		__u32 span = tw_hh_span(c);
		__u32 *m0 = &m->until[tw_hh_m0(h)],
		      *m1 = &m->until[tw_hh_m1(h)];
		if (!tw_hh_marked(*m0, j, span) || (__s32)(until - *m0) > 0)
			*(volatile __u32 *)m0 = until;
		if (!tw_hh_marked(*m1, j, span) || (__s32)(until - *m1) > 0)
			*(volatile __u32 *)m1 = until;
	}
	struct tw_hh_state *s = bpf_map_lookup_elem(&tw_hh_shared, &zero);
	if (s && (__s64)(until64 - s->marks_until) > 0)
		*(volatile __u64 *)&s->marks_until = until64;
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
		/* On the stack: p is a global function's argument, which
		 * 6.1's verifier does not take as a map key. */
		__u32 k4 = p->src4;
		if (bpf_map_lookup_elem(&tw_good4, &k4)) {
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
	if (bpf_map_lookup_elem(&tw_good6, pk.addr)) {
		if (st)
			st->exempt_good++;
		return 1;
	}
	return 0;
}

/* Reports a catch. */
static __always_inline void tw_hh_report(const struct tw_pkt *p,
					 const struct tw_hh_config *c,
					 const struct tw_hh_key *k,
					 struct tw_hh_stats *st, __u8 kind,
					 __u8 flags, __u32 count, __u64 now)
{
	if (st)
		st->caught++;
	struct tw_hh_event *e =
		bpf_ringbuf_reserve(&tw_hh_events, sizeof(*e), 0);
	if (!e) {
		if (st)
			st->ring_full++;
		return;
	}
	__builtin_memcpy(e->addr, k->w, 16);
	e->family = p->family;
	e->kind = kind;
	e->prefix = p->family == 4 ? 32 : c->prefix6;
	e->flags = flags;
	e->count = count;
	e->at_ns = now;
	bpf_ringbuf_submit(e, 0);
}

/* Makes a candidate a catch, in place, if this CPU is the one that swaps
 * its cand to 0; returns 1 then. A source the rails now exempt (they may
 * have changed since it became a candidate) is not caught: its entry
 * expires at once. */
static __always_inline int tw_hh_promote(const struct tw_pkt *p,
					 const struct tw_hh_config *c,
					 const struct tw_hh_key *k,
					 struct tw_prov *v, __u64 j, __u32 h,
					 __u8 kind, __u64 count)
{
	if (__sync_val_compare_and_swap(&v->cand, 1, 0) != 1)
		return 0;
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (tw_hh_exempt(p, st)) {
		v->expires_ns = 0;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u8 flags = c->monitor ? TW_PROV_MONITOR : 0;
	__u32 n = count > 0xffffffff ? 0xffffffff : count;
	v->added_ns = now;
	v->count = n;
	v->kind = kind;
	v->flags = flags;
	v->expires_ns = now + c->ttl_ns;
	tw_hh_mark(c, h, j, c->ttl_ticks);
	tw_hh_report(p, c, k, st, kind, flags, n, now);
	return 1;
}

/* A candidate's packet, counted exactly in its window; at the threshold
 * the candidate becomes a catch. Returns 1 if this packet caught it. A
 * count reset at a window's start racing another CPU's add can lose that
 * add: it undercounts, so it can delay a catch by a packet, never make
 * one. */
static __always_inline int tw_hh_cand_count(const struct tw_pkt *p,
					    const struct tw_hh_config *c,
					    const struct tw_hh_key *k,
					    struct tw_prov *v, __u64 j, __u32 h)
{
	__u32 win = tw_hh_win(c, j);
	if (v->cwin != win) {
		v->cwin = win;
		v->cpkts = 0;
	}
	__u64 n = __sync_fetch_and_add(&v->cpkts, 1) + 1;
	if (n < c->pkt_thresh)
		return 0;
	return tw_hh_promote(p, c, k, v, j, h, TW_HH_PACKETS, n);
}

/* The sampling decision: 1 in 2^sample_shift packets on average, by a
 * per-CPU countdown reloaded at random with a gap uniform over
 * [1, 2^(shift+1) - 1] (0 drawn counts as 2^shift, so the mean gap is
 * 2^shift exactly). The draws come from a per-CPU xorshift generator,
 * seeded by bpf_get_prandom_u32 once: the helper is a call, which here
 * costs as much as the rest of a sampled packet. Nobody outside sees the
 * generator's output, so a source cannot time its packets around it. */
static __always_inline __u8 tw_hh_sampled(const struct tw_hh_config *c)
{
	__u32 zero = 0;
	__u32 shift = c->sample_shift & 31;
	if (!shift)
		return 1;
	struct tw_hh_pcpu *pc = bpf_map_lookup_elem(&tw_hh_cpu, &zero);
	if (!pc)
		return 1;
	if (pc->skip > 1) {
		pc->skip--;
		return 0;
	}
	__u32 x = pc->rng;
	if (!x)
		x = bpf_get_prandom_u32() | 1;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	pc->rng = x;
	__u32 gap = x & ((2U << shift) - 1);
	pc->skip = gap ? gap : 1U << shift;
	return 1;
}

static __always_inline void tw_hh_bump(struct tw_hh_bucket *b, __u32 win,
				       __u8 sampled, __u8 syn)
{
	if (b->win != win) {
		b->win = win;
		b->pkts = 0;
		b->syns = 0;
	}
	b->pkts += sampled;
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

/* Makes the provisional entry (cand: a candidate, counted exactly from
 * now on, for three windows), marks it in the sketch and reports a catch;
 * an entry already there (made on another CPU meanwhile, or revoked by
 * the daemon) stays. The precise clock here, once an entry: its times are
 * the daemon's and the detect→drop benchmark's. */
static __always_inline void tw_hh_catch(const struct tw_pkt *p,
					const struct tw_hh_config *c, __u32 h,
					__u64 j, __u8 kind, __u32 count,
					__u8 cand)
{
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (tw_hh_exempt(p, st))
		return;
	struct tw_hh_key k = {};
	tw_hh_key_of(p, c, &k);
	__u64 now = bpf_ktime_get_ns();
	__u32 life = c->ttl_ticks;
	__u8 flags = c->monitor ? TW_PROV_MONITOR : 0;
	struct tw_prov v = {
		.added_ns = now,
		.expires_ns = now + c->ttl_ns,
		.count = count,
		.kind = kind,
		.flags = flags,
	};
	if (cand) {
		/* Three windows: the rest of this one, all of the next, in
		 * which a source steadily over its threshold is caught, and
		 * one for a late start; marks two ticks longer, for jiffies
		 * lagging the precise clock. */
		v.expires_ns = now + 3 * c->window_ns;
		v.cand = 1;
		v.cwin = tw_hh_win(c, j);
		life = (3U << (c->tick_shift & 31)) + 2;
	}
	void *map = p->family == 4 ? (void *)&tw_prov4 : (void *)&tw_prov6;
	long err = bpf_map_update_elem(map, &k, &v, BPF_NOEXIST);
	if (err == -17 /* EEXIST */) {
		struct tw_prov *e = bpf_map_lookup_elem(map, &k);
		if (!e)
			return;
		if (now < e->expires_ns) {
			/* A candidate over the SYN threshold is caught for it. */
			if (!cand && e->cand)
				tw_hh_promote(p, c, &k, e, j, h, kind, count);
			return;
		}
		/* Expired, and not removed: no packet of the source looked it
		 * up since (its marks ended with it), and the daemon sweeps
		 * once an interval. Replaced, or it would keep the source from
		 * being caught or watched until then. Two CPUs replacing it at
		 * once can both succeed (one report too many), never neither. */
		bpf_map_delete_elem(map, &k);
		err = bpf_map_update_elem(map, &k, &v, BPF_NOEXIST);
		if (err == -17 /* EEXIST */)
			return;
	}
	if (err) {
		if (st)
			st->table_full++;
		return;
	}
	tw_hh_mark(c, h, j, life);
	if (cand) {
		if (st)
			st->candidates++;
		return;
	}
	tw_hh_report(p, c, &k, st, kind, flags, count, now);
}

/* Whether an IPv4 source caught before it joined the known-good list has
 * joined since: the catch was judged without it (a client whose address a
 * flood spoofed in the moments before its handshake was verified), and
 * the daemon's revocation takes up to an interval and a half. The sieve
 * first, one bit, so a caught flood's packets pay a hash of their source,
 * not a lookup in the list. */
static __always_inline int tw_hh_joined4(__u32 src4)
{
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	if (!cfg || !tw_good_maybe(&src4, 1, cfg->seed ^ TW_GOOD_SIEVE_SALT))
		return 0;
	return bpf_map_lookup_elem(&tw_good4, &src4) != NULL;
}

/* tw_hh_count counts a packet that no rule decided and catches its
 * source when it is over a threshold (or makes it a candidate, when
 * sampling), from what the provisional check worked out (pre). */
static __always_inline int tw_hh_count(struct tw_pkt *p,
				       const struct tw_hh_config *c,
				       struct tw_hh_pre *pre)
{
	__u8 sampled = pre->sampled, syn = p->syn;
	if (!sampled && !syn)
		return 0;
	__u32 h = pre->hashed ? pre->h : tw_hh_hash(p, c);
	__u64 j = pre->jiffies;
	__u32 win = tw_hh_win(c, j);
	__u32 line = tw_hh_line_of(h), s0 = tw_hh_s0(h), s1 = tw_hh_s1(h);
	struct tw_hh_line *l = tw_hh_line_get(bpf_get_smp_processor_id(), line);
	if (!l)
		return 0;
	struct tw_hh_bucket *b0 = &l->b[s0], *b1 = &l->b[s1];
	tw_hh_bump(b0, win, sampled, syn);
	tw_hh_bump(b1, win, sampled, syn);
	__u32 pe = b0->pkts < b1->pkts ? b0->pkts : b1->pkts;
	__u32 se = b0->syns < b1->syns ? b0->syns : b1->syns;
	/* Over the local threshold: sum the CPUs at its crossing, then
	 * every eighth count, so a source that stays between the local and
	 * the global threshold costs little more than the others; and when
	 * this CPU's count alone reaches the global threshold, so a source
	 * that RSS keeps on one CPU (the common case) is caught at its
	 * threshold, not up to seven counts past it. */
	int due = (sampled && pe >= c->pkt_local &&
		   (!((pe - c->pkt_local) & 7) || pe == c->pkt_sum)) ||
		  (syn && se >= c->syn_local &&
		   (!((se - c->syn_local) & 7) || se == c->syn_thresh));
	if (!due)
		return 0;
	struct tw_hh_stats *st = tw_hh_stats_get();
	if (st)
		st->checks++;
	tw_hh_sum(line, s0, s1, win, &pe, &se);
	/* A catch before a candidate: SYNs (counted exactly) over their
	 * threshold are caught even when the packets would only make the
	 * source a candidate. */
	if (!c->sample_shift && pe >= c->pkt_sum)
		tw_hh_catch(p, c, h, j, TW_HH_PACKETS, pe, 0);
	else if (se >= c->syn_thresh)
		tw_hh_catch(p, c, h, j, TW_HH_SYNS, se, 0);
	else if (pe >= c->pkt_sum)
		tw_hh_catch(p, c, h, j, TW_HH_PACKETS, pe, 1);
	return 0;
}

static __always_inline int tw_hh_check(struct tw_pkt *p, __u32 len,
				       const struct tw_hh_config *c,
				       struct tw_hh_pre *pre)
{
	struct tw_hh_key k = {};
	void *map = NULL;
	struct tw_prov *v = tw_hh_prov_get(p, c, pre, &k, &map);
	if (!v || !map)
		return TW_R_PASS;
	__u64 now = bpf_ktime_get_ns();
	if (now >= v->expires_ns) {
		struct tw_hh_stats *st = tw_hh_stats_get();
		__u64 cand = v->cand;
		if (bpf_map_delete_elem(map, &k) == 0 && st && !cand)
			st->expired++;
		return TW_R_PASS;
	}
	if (v->cand) {
		if (!tw_hh_cand_count(p, c, &k, v, pre->jiffies, pre->h))
			return TW_R_PASS;
	} else if (v->flags & TW_PROV_REVOKED) {
		return TW_R_MAX;
	}
	/* An IPv6 entry holds a whole prefix: a known-good client inside
	 * it keeps passing while its neighbours flood. */
	if (p->family == 6) {
		__u32 k6[4]; /* on the stack, for 6.1 (tw_hh_exempt) */
		__builtin_memcpy(k6, p->src6, 16);
		if (bpf_map_lookup_elem(&tw_good6, k6))
			return TW_R_MAX;
	} else if (tw_hh_joined4(p->src4)) {
		return TW_R_MAX;
	}
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->bytes, len);
	if (v->flags & TW_PROV_MONITOR)
		return TW_R_PASS_PROVISIONAL;
	return TW_R_DROP_PROVISIONAL;
}

/* tw_hh_provisional: the provisional check, before the flow rules. Returns
 * TW_R_DROP_PROVISIONAL or TW_R_PASS_PROVISIONAL for a caught source,
 * TW_R_MAX for one the daemon revoked (passes, and is not counted again),
 * else TW_R_PASS (a candidate's packet too, counted). A global function:
 * verified once, on its own. */
__noinline int tw_hh_provisional(struct tw_pkt *p, __u32 len,
				 struct tw_hh_pre *pre, __u32 count)
{
	__u32 zero = 0;
	if (!p || !pre)
		return TW_R_PASS;
	pre->on = 0;
	pre->hashed = 0;
	pre->sampled = 0;
	pre->counted = 0;
	struct tw_hh_config *c = bpf_map_lookup_elem(&tw_hh_cfg, &zero);
	if (!c || !c->window_ns)
		return TW_R_PASS;
	/* jiffies: an inlined load, where either ktime helper is a call. */
	pre->jiffies = bpf_jiffies64();
	pre->on = 1;
	pre->sampled = tw_hh_sampled(c);
	int r = tw_hh_check(p, len, c, pre);
	/* No flow rule can decide the packet after this (count): it is
	 * counted here, sparing the filter a second call. */
	if (r == TW_R_PASS && count && (pre->sampled || p->syn)) {
		tw_hh_count(p, c, pre);
		pre->counted = 1;
	}
	return r;
}

/* tw_hh_observe counts a packet that no rule decided, when the flow rules
 * ran between it and the provisional check; the filter calls it only for
 * a packet the sketch counts (sampled, or a SYN). A global function, as
 * tw_hh_provisional. */
__noinline int tw_hh_observe(struct tw_pkt *p, struct tw_hh_pre *pre)
{
	__u32 zero = 0;
	if (!p || !pre || !pre->on || pre->counted)
		return 0;
	struct tw_hh_config *c = bpf_map_lookup_elem(&tw_hh_cfg, &zero);
	if (!c || !c->window_ns)
		return 0;
	return tw_hh_count(p, c, pre);
}

#endif

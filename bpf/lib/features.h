/* features.h - the paper's feature extraction: per (source, destination,
 * protocol) packet, byte and SYN counts of traffic that passed the filter,
 * in whichever per-CPU buffer tw_feat currently points at. A full buffer
 * costs one failed insert and a counter bump, never a stall. */
#ifndef TW_FEATURES_H
#define TW_FEATURES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "parse.h"

#define TW_EEXIST 17

static __always_inline void tw_feat_add(struct tw_feat_val *v,
					const struct tw_pkt *p, __u32 len)
{
	v->packets++;
	v->bytes += len;
	v->syns += p->syn;
}

static __always_inline void tw_features(const struct tw_pkt *p, __u32 len)
{
	__u32 zero = 0;
	void *buf = bpf_map_lookup_elem(&tw_feat, &zero);
	if (!buf)
		return;

	struct tw_feat_key k = {};
	k.family = p->family;
	k.proto = p->proto;
	if (p->family == 4) {
		__builtin_memcpy(k.src, &p->src4, 4);
		__builtin_memcpy(k.dst, &p->dst4, 4);
	} else {
		__builtin_memcpy(k.src, p->src6, 16);
		__builtin_memcpy(k.dst, p->dst6, 16);
	}

	struct tw_feat_val *v = bpf_map_lookup_elem(buf, &k);
	if (v) {
		tw_feat_add(v, p, len);
		return;
	}
	struct tw_feat_val nv = { .packets = 1, .bytes = len, .syns = p->syn };
	long err = bpf_map_update_elem(buf, &k, &nv, BPF_NOEXIST);
	if (!err)
		return;
	if (err == -TW_EEXIST) {
		/* Another CPU inserted the key first; this CPU's slot is ours. */
		v = bpf_map_lookup_elem(buf, &k);
		if (v)
			tw_feat_add(v, p, len);
		return;
	}
	struct tw_feat_stats *s = bpf_map_lookup_elem(&tw_fstats, &zero);
	if (s)
		s->overflow++;
}

#endif

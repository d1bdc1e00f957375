/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* conntrack.h - asks netfilter's connection tracking whether it knows a TCP
 * flow, through the kfuncs bpf_xdp_ct_lookup and bpf_ct_release. Their
 * types are kernel-internal, not uapi, so they are declared here as this
 * kernel's BTF has them; the loader checks every kfunc declaration against
 * the running kernel's BTF and refuses a mismatch. */
#ifndef TW_CONNTRACK_H
#define TW_CONNTRACK_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "parse.h"

/* Only ever held as a pointer to release. It is declared complete all the
 * same: an incomplete struct becomes a BTF forward declaration, which the
 * loader does not accept as matching the kernel's struct. */
struct nf_conn {
	unsigned long status;
};

/* NF_BPF_CT_OPTS_SZ is 16 since the zone fields came (6.6); the kfunc
 * takes the size so that older layouts keep working. 6.1 takes only 12
 * (and with 16 fails every lookup, so that every ACK would count as a
 * conntrack error and be dropped): the lookup passes TW_CT_OPTS_SZ, the
 * layout without the zone, which 6.1, 6.12 and 6.18 accept. tierwall
 * looks up in the default zone only. */
struct bpf_ct_opts {
	__s32 netns_id;
	__s32 error; /* out: -ENOENT when the flow is unknown */
	__u8 l4proto;
	__u8 dir;
	__u16 ct_zone_id;
	__u8 ct_zone_dir;
	__u8 reserved[3];
};

_Static_assert(sizeof(struct bpf_ct_opts) == 16, "NF_BPF_CT_OPTS_SZ");
#define TW_CT_OPTS_SZ 12

extern struct nf_conn *bpf_xdp_ct_lookup(struct xdp_md *xdp_ctx,
					 struct bpf_sock_tuple *bpf_tuple,
					 __u32 tuple__sz,
					 struct bpf_ct_opts *opts,
					 __u32 opts__sz) __ksym;
extern void bpf_ct_release(struct nf_conn *ct) __ksym;

#define TW_ENOENT 2

/* 1 when conntrack has an entry for the packet's TCP flow in either
 * direction (the tuple is looked up as the packet has it), 0 when it has
 * none, a negative errno when the lookup itself failed. Only hashed, that
 * is confirmed, entries are found. */
static __always_inline int tw_ct_known(struct xdp_md *ctx,
				       const struct tw_pkt *p)
{
	struct bpf_sock_tuple t = {};
	struct bpf_ct_opts o = { .netns_id = BPF_F_CURRENT_NETNS,
				 .l4proto = IPPROTO_TCP };
	__u32 sz;

	if (p->family == 4) {
		t.ipv4.saddr = p->src4;
		t.ipv4.daddr = p->dst4;
		t.ipv4.sport = p->sport;
		t.ipv4.dport = p->dport;
		sz = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->src6, 16);
		__builtin_memcpy(t.ipv6.daddr, p->dst6, 16);
		t.ipv6.sport = p->sport;
		t.ipv6.dport = p->dport;
		sz = sizeof(t.ipv6);
	}
	struct nf_conn *ct = bpf_xdp_ct_lookup(ctx, &t, sz, &o, TW_CT_OPTS_SZ);
	if (ct) {
		bpf_ct_release(ct);
		return 1;
	}
	return o.error == -TW_ENOENT ? 0 : (o.error < 0 ? o.error : -1);
}

#endif

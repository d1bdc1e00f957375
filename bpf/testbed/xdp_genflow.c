// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_genflow.c - the generator's flow mode. Like xdp_gen.c it runs with
 * BPF_PROG_TEST_RUN in live-frames mode and returns XDP_TX, but each
 * repetition builds the next frame of a schedule user space wrote: frame k
 * is tw_gf_sched[k], a flow index plus what varies per frame (direction,
 * TCP flags, seq/ack, length, payload template). The 5-tuple derives from
 * the flow index: client = client base + flow % hosts, client port =
 * port_lo + (flow / hosts) % ports, server = server base + flow % servers
 * (internal/testbed/gen mirrors this arithmetic).
 *
 * Live-frame pages are recycled without re-initialisation and with
 * whatever the last user left in them, so every frame rewrites all bytes
 * that differ between frames: the headers and a fixed payload region
 * (tw_gf_region bytes from the end of a UDP header: template or zeros).
 * Bytes beyond it are the zeros of the initial buffer. Each frame is then
 * cut to its length with bpf_xdp_adjust_tail; the kernel restores the full
 * length before the page's next use.
 *
 * The report is exact because every frame not transmitted is named in
 * tw_gf_drops: the program's own failures, and the kernel's, which two
 * tracepoint programs attribute. XDP_TX from a test run becomes a redirect
 * to the same device: a refusal at once fires xdp_redirect_err for the
 * frame just returned; otherwise the frame joins a per-CPU bulk queue whose
 * flush fires xdp_devmap_xmit with (sent, drops), the drops being the last
 * frames of the bulk. A FIFO of schedule indices mirrors that queue. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "../lib/genflow.h"

/* Set before load: the family and the address plan. Address words are in
 * host order; the flow's offset goes into the last word of the family
 * (word 0 for IPv4, word 3 for IPv6) and never carries (checked in Go). */
volatile const __u32 tw_gf_family = 4;
volatile const __u32 tw_gf_client[4] = {};
volatile const __u32 tw_gf_server[4] = {};
volatile const __u32 tw_gf_hosts = 1;
volatile const __u32 tw_gf_servers = 1;
volatile const __u32 tw_gf_port_lo = 1024;
volatile const __u32 tw_gf_ports = 1;
volatile const __u32 tw_gf_region = 28; /* <= TW_GF_REGION, >= 13 */
volatile const __u8 tw_gf_mac[12] = {}; /* destination, source */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct tw_gf_pkt);
	__uint(max_entries, 1); /* sized by user space */
} tw_gf_sched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1); /* as many as tw_gf_sched */
} tw_gf_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_gf_payload);
	__uint(max_entries, 256);
} tw_gf_pl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_gf_state);
	__uint(max_entries, 1);
} tw_gf_st SEC(".maps");

static __always_inline void tw_gf_put16(__u8 *p, __u32 v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

static __always_inline void tw_gf_put32(__u8 *p, __u32 v)
{
	p[0] = v >> 24;
	p[1] = (v >> 16) & 0xff;
	p[2] = (v >> 8) & 0xff;
	p[3] = v & 0xff;
}

static __always_inline __u32 tw_gf_sum32(__u32 w)
{
	return (w >> 16) + (w & 0xffff);
}

static __always_inline __u16 tw_gf_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s & 0xffff;
}

/* tw_gf_build writes frame p into the packet; -1 when it cannot. */
static __always_inline int tw_gf_build(struct xdp_md *ctx,
				       const struct tw_gf_pkt *p,
				       const struct tw_gf_payload *pl)
{
	int v4 = tw_gf_family == 4;
	int udp = p->info & TW_GF_UDP;
	int s2c = p->info & TW_GF_S2C;
	__u32 iphl = v4 ? 20 : 40;
	__u32 iplen = p->iplen;
	__u32 proto = udp ? 17 : 6;
	__u32 l4len = iplen - iphl;
	if (iplen < iphl + (udp ? 8 : 20) || iplen > 1500)
		return -1;

	/* The payload region first: the helper may not be followed by
	 * packet pointers taken before it. */
	__u32 len = tw_gf_region - (udp ? 0 : 12);
	if (len == 0 || len > TW_GF_REGION)
		return -1;
	if (bpf_xdp_store_bytes(ctx, 14 + iphl + (udp ? 8 : 20), (void *)pl->b,
				len) < 0)
		return -1;

	__u32 host = p->flow % tw_gf_hosts;
	__u32 cport = tw_gf_port_lo + (p->flow / tw_gf_hosts) % tw_gf_ports;
	__u32 srv = p->flow % tw_gf_servers;
	__u32 c[4], s[4];
	__u64 asum = 0;
	for (int i = 0; i < 4; i++) {
		c[i] = tw_gf_client[i];
		s[i] = tw_gf_server[i];
	}
	if (v4) {
		c[0] += host;
		s[0] += srv;
		asum = tw_gf_sum32(c[0]) + tw_gf_sum32(s[0]);
	} else {
		c[3] += host;
		s[3] += srv;
		for (int i = 0; i < 4; i++)
			asum += tw_gf_sum32(c[i]) + tw_gf_sum32(s[i]);
	}
	__u32 *src = s2c ? s : c, *dst = s2c ? c : s;
	__u32 sport = s2c ? p->sport : cport, dport = s2c ? cport : p->sport;

	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	if (data + 14 + 20 > data_end)
		return -1;
	for (int i = 0; i < 12; i++)
		data[i] = tw_gf_mac[i];
	__u8 *ip = data + 14;
	__u64 ph; /* pseudo-header sum */
	if (v4) {
		data[12] = 0x08;
		data[13] = 0x00;
		ip[0] = 0x45;
		ip[1] = 0;
		tw_gf_put16(ip + 2, iplen);
		tw_gf_put16(ip + 4, 0);
		tw_gf_put16(ip + 6, 0x4000); /* DF */
		ip[8] = 64;
		ip[9] = proto;
		tw_gf_put32(ip + 12, src[0]);
		tw_gf_put32(ip + 16, dst[0]);
		tw_gf_put16(ip + 10, tw_gf_fold(0x4500 + iplen + 0x4000 +
						(64 << 8 | proto) + asum));
		ph = asum + proto + l4len;
	} else {
		if (ip + 40 > data_end)
			return -1;
		data[12] = 0x86;
		data[13] = 0xdd;
		tw_gf_put32(ip, 0x60000000);
		tw_gf_put16(ip + 4, l4len);
		ip[6] = proto;
		ip[7] = 64;
		for (int i = 0; i < 4; i++) {
			tw_gf_put32(ip + 8 + 4 * i, src[i]);
			tw_gf_put32(ip + 24 + 4 * i, dst[i]);
		}
		ph = asum + proto + l4len;
	}
	__u8 *l4 = ip + iphl;
	if (l4 + 20 > data_end)
		return -1;
	tw_gf_put16(l4, sport);
	tw_gf_put16(l4 + 2, dport);
	__u64 sum = ph + sport + dport + pl->sum;
	if (udp) {
		tw_gf_put16(l4 + 4, l4len);
		__u16 csum = tw_gf_fold(sum + l4len);
		tw_gf_put16(l4 + 6, csum ? csum : 0xffff);
	} else {
		tw_gf_put32(l4 + 4, p->seq);
		tw_gf_put32(l4 + 8, p->ack);
		l4[12] = 5 << 4;
		l4[13] = p->tcp_flags;
		tw_gf_put16(l4 + 14, 0xffff);
		tw_gf_put16(l4 + 18, 0);
		sum += tw_gf_sum32(p->seq) + tw_gf_sum32(p->ack) +
		       (0x5000 | p->tcp_flags) + 0xffff;
		tw_gf_put16(l4 + 16, tw_gf_fold(sum));
	}

	/* Ethernet pads to 60 bytes; the padding lies in the zeroed region. */
	int flen = 14 + iplen < 60 ? 60 : 14 + iplen;
	int delta = flen - (int)(data_end - data);
	if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta) < 0)
		return -1;
	return 0;
}

static __always_inline void tw_gf_drop(struct tw_gf_state *st, __u32 k)
{
	__u32 i = st->ndrop;
	__u32 *d = bpf_map_lookup_elem(&tw_gf_drops, &i);
	if (!d) {
		st->lost++;
		return;
	}
	*d = k;
	st->ndrop = i + 1;
}

static __always_inline struct tw_gf_state *tw_gf_mine(void)
{
	__u32 zero = 0;
	struct tw_gf_state *st = bpf_map_lookup_elem(&tw_gf_st, &zero);
	if (!st || st->tid != bpf_get_current_pid_tgid())
		return 0;
	return st;
}

SEC("xdp")
int tw_genflow(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct tw_gf_state *st = bpf_map_lookup_elem(&tw_gf_st, &zero);
	if (!st)
		return XDP_ABORTED;
	__u32 k = st->seq;
	if (k >= st->n)
		return XDP_DROP; /* past the schedule: user space checks seq */
	st->seq = k + 1;
	struct tw_gf_pkt *p = bpf_map_lookup_elem(&tw_gf_sched, &k);
	if (!p)
		goto drop;
	__u32 pli = p->pl;
	struct tw_gf_payload *pl = bpf_map_lookup_elem(&tw_gf_pl, &pli);
	if (!pl || tw_gf_build(ctx, p, pl) < 0)
		goto drop;
	st->q[st->qtail & (TW_GF_FIFO - 1)] = k;
	st->qtail++;
	return XDP_TX;
drop:
	tw_gf_drop(st, k);
	return XDP_DROP;
}

/* A bulk flush: (from_dev, to_dev, sent, drops, err). The bulk holds the
 * oldest sent + drops frames of the FIFO, in order. */
SEC("tp_btf/xdp_devmap_xmit")
int tw_genflow_xmit(__u64 *ctx)
{
	struct tw_gf_state *st = tw_gf_mine();
	if (!st)
		return 0;
	/* XDP_TX sends out of the receiving device: a flush to another
	 * device is a stage downstream (the emulated NIC redirecting to
	 * the host) that ran in this thread's softirq. */
	if (ctx[0] != ctx[1])
		return 0;
	int sent = (int)ctx[2], drops = (int)ctx[3];
	if (sent < 0 || drops < 0 || drops > 64 ||
	    (__u32)(sent + drops) > st->qtail - st->qhead) {
		st->lost++;
		return 0;
	}
	__u32 h = st->qhead + sent;
	for (int i = 0; i < 64; i++) {
		if (i >= drops)
			break;
		tw_gf_drop(st, st->q[(h + i) & (TW_GF_FIFO - 1)]);
	}
	st->xmit_drops += drops;
	st->qhead += sent + drops;
	return 0;
}

/* A refusal before queueing: the frame the program just returned. */
SEC("tp_btf/xdp_redirect_err")
int tw_genflow_rerr(__u64 *ctx)
{
	struct tw_gf_state *st = tw_gf_mine();
	if (!st)
		return 0;
	/* (dev, xdp, tgt, err, map_type, map_id, index): a test run's
	 * XDP_TX is a redirect with map id INT_MAX; a downstream stage's
	 * bpf_redirect in this thread's softirq has another. */
	if ((__u32)ctx[5] != 0x7fffffff)
		return 0;
	if (st->qtail == st->qhead) {
		st->lost++;
		return 0;
	}
	st->qtail--;
	tw_gf_drop(st, st->q[st->qtail & (TW_GF_FIFO - 1)]);
	st->redirect_errs++;
	return 0;
}

char _license[] SEC("license") = "Dual BSD/GPL";

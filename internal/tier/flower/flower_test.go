// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// Golden messages were captured from iproute2's tc on a veth
// (testdata/*.cmd has each command; testdata/capture-mitigation.sh and
// capture-flowtable.sh capture them), with
//
//	strace -f -e trace=sendmsg -e write=3 tc filter ...
//
// tc sent them although this kernel then refused them (no flower here).
// Each is compared at the ifindex it was captured with; goldenIfindex is
// the veth's of the first captures.
const goldenIfindex = 6

// goldenIfindexOf is the ifindex in golden message b.
func goldenIfindexOf(b []byte) int { return int(binary.NativeEndian.Uint32(b[16+4:])) }

func golden(t *testing.T, name string) []byte {
	t.Helper()
	h, err := os.ReadFile("testdata/" + name + ".hex")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(h)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

var goldenRules = []struct {
	name   string
	handle uint32
	rule   tier.Rule
}{
	{"add-src4", 7, tier.Rule{Match: tier.SourceMatch(addr("192.0.2.7")), Action: tier.Drop}},
	{"add-src6", 8, tier.Rule{Match: tier.SourceMatch(addr("2001:db8::7")), Action: tier.Drop}},
	{"add-flow4", 9, tier.Rule{Match: tier.Match{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: unix.IPPROTO_TCP, SrcPort: 40000, DstPort: 443}, Action: tier.Forward}},
	{"add-flow6", 10, tier.Rule{Match: tier.Match{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: unix.IPPROTO_UDP, SrcPort: 5353, DstPort: 53}, Action: tier.Forward}},
}

func TestEncodeMatchesTC(t *testing.T) {
	for _, g := range goldenRules {
		want := golden(t, g.name)
		got, err := encodeAdd(goldenIfindexOf(want), g.handle, g.rule)
		if err != nil {
			t.Fatal(err)
		}
		// The 16-byte nlmsghdr differs only in sequence and port id; the
		// type and flags tierwall uses are checked separately below.
		if !bytes.Equal(got, want[16:]) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, got, want[16:])
		}
		if typ, flags := binary.NativeEndian.Uint16(want[4:]), binary.NativeEndian.Uint16(want[6:]); typ != unix.RTM_NEWTFILTER ||
			netlink.HeaderFlags(flags) != netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl {
			t.Errorf("%s: golden header type %#x flags %#x differ from what Install sends", g.name, typ, flags)
		}
	}
	for _, d := range []struct {
		name   string
		handle uint32
		fam    uint16
	}{{"del-src4", 7, ethPIP}, {"del-src6", 8, ethPIPv6}} {
		want := golden(t, d.name)
		got, err := encodeDel(goldenIfindexOf(want), d.handle, d.fam)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[16:]) {
			t.Errorf("%s:\n got %x\nwant %x", d.name, got, want[16:])
		}
	}
}

// kernelView is what the kernel reports for a filter tierwall added:
// the request with in_hw set, an in_hw_count and action stats.
func kernelView(t *testing.T, body []byte, inHW bool, pkts uint32, bytes_ uint64) []byte {
	t.Helper()
	return kernelViewStats(t, body, inHW, func(s *netlink.AttributeEncoder) {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint64(b, bytes_)
		binary.NativeEndian.PutUint32(b[8:], pkts)
		s.Bytes(statsBasicHW, b)
	})
}

// kernelViewStats is kernelView with the action's TCA_ACT_STATS written
// by stats.
func kernelViewStats(t *testing.T, body []byte, inHW bool, stats func(*netlink.AttributeEncoder)) []byte {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(body[tcmsgLen:])
	if err != nil {
		t.Fatal(err)
	}
	ae := netlink.NewAttributeEncoder()
	for ad.Next() {
		if ad.Type() != tcaOptions {
			ae.Bytes(ad.Type(), ad.Bytes())
			continue
		}
		ae.Nested(tcaOptions, func(o *netlink.AttributeEncoder) error {
			ad.Nested(func(od *netlink.AttributeDecoder) error {
				for od.Next() {
					switch od.Type() {
					case flowerFlags:
						f := uint32(clsFlagsSkipSW)
						if inHW {
							f |= clsFlagsInHW
							o.Uint32(flowerInHWCount, 1)
						}
						o.Uint32(flowerFlags, f)
					case flowerAct:
						o.Nested(flowerAct, func(a *netlink.AttributeEncoder) error {
							a.Nested(actPrio, func(g *netlink.AttributeEncoder) error {
								od.Nested(func(ad2 *netlink.AttributeDecoder) error {
									for ad2.Next() {
										ad2.Nested(func(gd *netlink.AttributeDecoder) error {
											for gd.Next() {
												g.Bytes(gd.Type(), gd.Bytes())
											}
											return nil
										})
									}
									return nil
								})
								g.Nested(actStats, func(s *netlink.AttributeEncoder) error {
									stats(s)
									return nil
								})
								return nil
							})
							return nil
						})
					default:
						o.Bytes(od.Type(), od.Bytes())
					}
				}
				return nil
			})
			return nil
		})
	}
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, body[:tcmsgLen]...), attrs...)
}

func TestDecodeRoundTrip(t *testing.T) {
	for _, g := range goldenRules {
		body, _ := encodeAdd(goldenIfindex, g.handle, g.rule)
		f, ok, err := decodeFilter(kernelView(t, body, true, 42, 4200))
		if err != nil || !ok {
			t.Fatalf("%s: ok=%v err=%v", g.name, ok, err)
		}
		if f.rule != g.rule || f.handle != g.handle || !f.inHW || f.hwCount != 1 || f.counters != (tier.Counters{Packets: 42, Bytes: 4200}) {
			t.Errorf("%s: decoded %+v", g.name, f)
		}
	}
	// Someone else's filter at our priority but without our cookie.
	body, _ := encodeAdd(goldenIfindex, 3, goldenRules[0].rule)
	body = bytes.Replace(body, Cookie, []byte("othertoo"), 1)
	if _, ok, _ := decodeFilter(body); ok {
		t.Error("foreign filter taken for tierwall's")
	}
}

// A filter in software only (skip_hw, or not taken by the driver) has
// hardware stats that stay 0, as 6.1's cls_flower reports them beside the
// combined ones: its counters are the combined stats, with the 64-bit
// count that follows them. A filter in hardware counts in hardware.
func TestDecodeSoftwareCounters(t *testing.T) {
	basic := func(s *netlink.AttributeEncoder, typ uint16, pkts uint32, bytes_ uint64) {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint64(b, bytes_)
		binary.NativeEndian.PutUint32(b[8:], pkts)
		s.Bytes(typ, b)
	}
	g := goldenRules[0]
	body, _ := encodeAdd(goldenIfindex, g.handle, g.rule)
	for _, tc := range []struct {
		name string
		inHW bool
		want tier.Counters
	}{
		{"software", false, tier.Counters{Packets: 5<<32 + 7, Bytes: 99000}},
		{"hardware", true, tier.Counters{Packets: 3, Bytes: 300}},
	} {
		view := kernelViewStats(t, body, tc.inHW, func(s *netlink.AttributeEncoder) {
			basic(s, statsBasic, 7, 99000)
			s.Uint64(statsPkt64, 5<<32+7)
			if tc.inHW {
				basic(s, statsBasicHW, 3, 300)
			} else {
				basic(s, statsBasicHW, 0, 0)
			}
		})
		f, ok, err := decodeFilter(view)
		if err != nil || !ok {
			t.Fatalf("%s: ok=%v err=%v", tc.name, ok, err)
		}
		if f.counters != tc.want {
			t.Errorf("%s: counters %+v, want %+v", tc.name, f.counters, tc.want)
		}
	}
}

// fakeKernel answers like rtnetlink for one flower-capable device,
// keying filters as the kernel does (priority, protocol, handle) and
// keeping one protocol per priority.
type fakeKernel struct {
	t       *testing.T
	inHW    bool
	filters map[fkey][]byte
	log     []string
}

// protoClash is the kernel's rule for a request naming filter k: a
// priority holds filters of one protocol, and tcf_chain_tp_find
// (net/sched/cls_api.c) answers any add, delete or get there with another
// protocol with EINVAL ("Specified filter protocol does not match ...").
// A priority whose last filter went takes any protocol again.
func protoClash[V any](filters map[fkey]V, k fkey) bool {
	for k2 := range filters {
		if k2.prio == k.prio && k.proto != 0 && k2.proto != k.proto {
			return true
		}
	}
	return false
}

// isFilterReq: req adds, deletes or gets one filter (not a qdisc, not a
// dump). Dumps are told by type, as NLM_F_EXCL shares its bit with
// NLM_F_MATCH, part of netlink.Dump.
func isFilterReq(req netlink.Message) bool {
	switch req.Header.Type {
	case unix.RTM_NEWTFILTER, unix.RTM_DELTFILTER:
		return true
	case unix.RTM_GETTFILTER:
		return req.Header.Flags&netlink.Dump != netlink.Dump
	}
	return false
}

func (k *fakeKernel) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	reply := func(ms ...netlink.Message) ([]netlink.Message, error) {
		for i := range ms {
			ms[i].Header.Sequence, ms[i].Header.PID = req.Header.Sequence, nltest.PID
		}
		return ms, nil
	}
	fk := keyOf(req.Data)
	if isFilterReq(req) && protoClash(k.filters, fk) {
		k.log = append(k.log, "EINVAL")
		return nltest.Error(int(unix.EINVAL), reqs)
	}
	switch req.Header.Type {
	case unix.RTM_NEWQDISC:
		k.log = append(k.log, "qdisc add")
		return nltest.Error(0, reqs)
	case unix.RTM_DELQDISC:
		k.log = append(k.log, "qdisc del")
		return nltest.Error(0, reqs)
	case unix.RTM_NEWTFILTER:
		k.log = append(k.log, "add")
		if _, ok := k.filters[fk]; ok {
			return nltest.Error(int(unix.EEXIST), reqs)
		}
		k.filters[fk] = kernelView(k.t, req.Data, k.inHW, 0, 0)
		return nltest.Error(0, reqs)
	case unix.RTM_DELTFILTER:
		k.log = append(k.log, "del")
		if _, ok := k.filters[fk]; !ok {
			return nltest.Error(int(unix.ENOENT), reqs)
		}
		delete(k.filters, fk)
		return nltest.Error(0, reqs)
	case unix.RTM_GETTFILTER:
		if req.Header.Flags&netlink.Dump != 0 {
			var ms []netlink.Message
			for fk2, f := range k.filters {
				if (fk.prio == 0 || fk.prio == fk2.prio) && (fk.proto == 0 || fk.proto == fk2.proto) {
					ms = append(ms, netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER, Flags: netlink.Multi}, Data: f})
				}
			}
			ms = append(ms, netlink.Message{Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi}, Data: make([]byte, 4)})
			return reply(ms...)
		}
		f, ok := k.filters[fk]
		if !ok {
			return nltest.Error(int(unix.ENOENT), reqs)
		}
		return reply(netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER}, Data: f})
	}
	k.t.Fatalf("unexpected request type %d", req.Header.Type)
	return nil, nil
}

func fakeTable(t *testing.T, k *fakeKernel) (*Table, error) {
	k.t, k.filters = t, map[fkey][]byte{}
	return open(nltest.Dial(k.handle), "lo", 2, false)
}

func TestInstallConfirmsHardware(t *testing.T) {
	k := &fakeKernel{inHW: true}
	tb, err := fakeTable(t, k)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, g := range goldenRules[:2] {
		if _, err := tb.Install(ctx, g.rule); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.Install(ctx, goldenRules[2].rule); !errors.Is(err, tier.ErrTableFull) {
		t.Fatalf("third rule with capacity 2: %v", err)
	}
	es, err := tb.List(ctx)
	if err != nil || len(es) != 2 {
		t.Fatalf("list: %v %+v", err, es)
	}
	// Restart: a new Table re-adopts both rules and their handles.
	tb2, err := open(nltest.Dial(k.handle), "lo", 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(tb2.rules) != 2 || tb2.next <= 2 {
		t.Fatalf("re-adopted %v next %d", tb2.rules, tb2.next)
	}
	if _, _, err := tb2.Remove(ctx, goldenRules[0].rule.Match); err != nil {
		t.Fatal(err)
	}
	if err := tier.Flush(ctx, tb2); err != nil {
		t.Fatal(err)
	}
	if len(k.filters) != 0 {
		t.Fatalf("filters left after flush: %d", len(k.filters))
	}
}

func TestNotInHardwareIsAFailure(t *testing.T) {
	// The probe itself does not reach hardware: Open refuses the backend,
	// and neither the probe filter nor the qdisc it created stays.
	k := &fakeKernel{inHW: false}
	if _, err := fakeTable(t, k); !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("open: %v, want ErrUnsupported", err)
	}
	if len(k.filters) != 0 || k.log[len(k.log)-1] != "qdisc del" {
		t.Fatalf("left behind: filters %d, log %v", len(k.filters), k.log)
	}
	// Hardware that stops taking rules later: Install fails, and the
	// software-only leftover is removed.
	k = &fakeKernel{inHW: true}
	tb, err := fakeTable(t, k)
	if err != nil {
		t.Fatal(err)
	}
	k.inHW = false
	if _, err := tb.Install(context.Background(), goldenRules[0].rule); !errors.Is(err, tier.ErrNotInHardware) {
		t.Fatalf("install: %v, want ErrNotInHardware", err)
	}
	if len(k.filters) != 0 || len(tb.rules) != 0 {
		t.Fatalf("half-installed rule left: %d filters, %d rules", len(k.filters), len(tb.rules))
	}
}

func TestNoFlowerOnThisKernel(t *testing.T) {
	// The real failure path: this kernel has no flower classifier.
	testutil.RequireRoot(t)
	const a, b = "twflw0", "twflw1"
	exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", a).Run()
	_, err := Open(a, 0)
	if err == nil {
		t.Skip("this kernel offloads flower on veth?")
	}
	if !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("open: %v, want ErrUnsupported", err)
	}
	out, _ := exec.Command("tc", "qdisc", "show", "dev", a).CombinedOutput()
	if strings.Contains(string(out), "clsact") {
		t.Errorf("clsact qdisc left behind: %s", out)
	}
	if _, err := Open("twflw-missing", 0); !errors.Is(err, tier.ErrUnsupported) {
		t.Errorf("missing interface: %v", err)
	}
}

// TestBothFamilies installs an IPv4 and an IPv6 rule on one Table: the
// kernel keeps one protocol per priority, so they need a priority each.
func TestBothFamilies(t *testing.T) {
	k := &fakeKernel{inHW: true}
	tb, err := fakeTable(t, k)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v4, v6 := goldenRules[0].rule, goldenRules[1].rule
	for _, r := range []tier.Rule{v4, v6} {
		if _, err := tb.Install(ctx, r); err != nil {
			t.Fatalf("install %s: %v (kernel log %v)", r.Match, err, k.log)
		}
	}
	prios := map[uint16]uint16{}
	for fk := range k.filters {
		prios[fk.prio] = fk.proto
	}
	if len(prios) != 2 || prios[Priority] != ethPIP || prios[Priority6] != ethPIPv6 {
		t.Fatalf("priorities and protocols in the kernel: %#x", prios)
	}
	es, err := tb.List(ctx)
	if err != nil || len(es) != 2 {
		t.Fatalf("list: %v %+v", err, es)
	}
	got := map[tier.Rule]bool{es[0].Rule: true, es[1].Rule: true}
	if !got[v4] || !got[v6] {
		t.Fatalf("listed %+v", es)
	}
	// A restarted Table adopts both.
	tb2, err := open(nltest.Dial(k.handle), "lo", 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(tb2.rules) != 2 {
		t.Fatalf("re-adopted %v", tb2.rules)
	}
	for _, r := range []tier.Rule{v6, v4} {
		if _, _, err := tb2.Remove(ctx, r.Match); err != nil {
			t.Fatalf("remove %s: %v", r.Match, err)
		}
	}
	if len(k.filters) != 0 {
		t.Fatalf("filters left: %v", k.filters)
	}
	// Someone else's IPv4 filter at Priority6 keeps IPv6 out: Open says
	// so rather than failing on the first IPv6 rule.
	body, _ := encodeFilter(1, 3, Priority6, v4, []byte("someone"))
	k.filters[keyOf(body)] = body
	if _, err := open(nltest.Dial(k.handle), "lo", 2, false); !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("open with IPv4 at the IPv6 priority: %v", err)
	}
}

// TestMovesIPv6OffPriority: an earlier version put IPv6 rules at Priority
// too (when it held no IPv4 one), which keeps every IPv4 filter out. Open
// moves them to Priority6, handle and rule kept.
func TestMovesIPv6OffPriority(t *testing.T) {
	k := &fakeKernel{inHW: true}
	k.t, k.filters = t, map[fkey][]byte{}
	v4, v6 := goldenRules[0].rule, goldenRules[1].rule
	flow6 := goldenRules[3].rule
	for _, g := range []struct {
		prio   uint16
		handle uint32
		r      tier.Rule
	}{{Priority, 4, v6}, {Priority, 9, flow6}, {Priority6, 9, flow6}} { // flow6: a move cut short
		body, _ := encodeFilter(1, g.handle, g.prio, g.r, Cookie)
		k.filters[keyOf(body)] = kernelView(t, body, true, 0, 0)
	}
	tb, err := open(nltest.Dial(k.handle), "lo", 4, false)
	if err != nil {
		t.Fatalf("open: %v (kernel log %v)", err, k.log)
	}
	want := map[fkey]bool{{Priority6, ethPIPv6, 4}: true, {Priority6, ethPIPv6, 9}: true}
	if len(k.filters) != len(want) {
		t.Fatalf("filters after open: %v", k.filters)
	}
	for fk := range k.filters {
		if !want[fk] {
			t.Fatalf("filter %+v after open", fk)
		}
	}
	if h := tb.rules[v6.Match]; h != 4 || len(tb.rules) != 2 || tb.next != 10 {
		t.Fatalf("adopted %v next %d", tb.rules, tb.next)
	}
	ctx := context.Background()
	if _, err := tb.Install(ctx, v4); err != nil {
		t.Fatal(err)
	}
	for _, r := range []tier.Rule{v6, flow6, v4} {
		if _, _, err := tb.Remove(ctx, r.Match); err != nil {
			t.Fatalf("remove %s: %v", r.Match, err)
		}
	}
	if len(k.filters) != 0 {
		t.Fatalf("filters left: %v", k.filters)
	}
}

// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flowtab"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func key(proto uint8, a, b string) tier.FlowKey {
	k, _ := tier.NewFlowKey(proto, ap(a), ap(b))
	return k
}

// The golden flow filters (testdata/capture-flowtable.sh has the tc
// commands): a flow's direction, its slot's handle, its id in the cookie.
var goldenFlows = []struct {
	name   string
	key    tier.FlowKey
	dir    int
	slot   uint32
	id     uint64
	action tier.FlowAction
}{
	{"ft-add4-tcp-0", key(unix.IPPROTO_TCP, "10.0.0.1:40000", "10.0.0.2:443"), 0, 0, 7, tier.FlowDiscard},
	{"ft-add4-tcp-1", key(unix.IPPROTO_TCP, "10.0.0.1:40000", "10.0.0.2:443"), 1, 0, 7, tier.FlowDiscard},
	{"ft-add4-udp-0", key(unix.IPPROTO_UDP, "192.0.2.1:5353", "192.0.2.53:53"), 0, 1, 8, tier.FlowForward},
	{"ft-add4-icmp-0", key(unix.IPPROTO_ICMP, "10.0.0.1:0", "10.0.0.9:0"), 0, 2, 9, tier.FlowDiscard},
	{"ft-add6-tcp-1", key(unix.IPPROTO_TCP, "[2001:db8::1]:40000", "[2001:db8::2]:443"), 1, 0, 10, tier.FlowDiscard},
	{"ft-add6-udp-0", key(unix.IPPROTO_UDP, "[2001:db8::1]:5353", "[2001:db8::35]:53"), 0, 1, 11, tier.FlowForward},
}

func TestFlowFiltersMatchTC(t *testing.T) {
	for _, g := range goldenFlows {
		want := golden(t, g.name)
		ifindex := int(binary.NativeEndian.Uint32(want[16+4:]))
		prio, _ := flowPrio(g.key)
		got, err := encodeFilter(ifindex, handleOf(g.slot, g.dir), prio, directionRule(g.key, g.dir, g.action), flowCookie(g.id))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[16:]) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, got, want[16:])
		}
		if typ, flags := binary.NativeEndian.Uint16(want[4:]), binary.NativeEndian.Uint16(want[6:]); typ != unix.RTM_NEWTFILTER ||
			netlink.HeaderFlags(flags) != netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl {
			t.Errorf("%s: golden header type %#x flags %#x differ from what a learn sends", g.name, typ, flags)
		}
		// What the kernel reports back decodes to the same flow.
		f, ok, err := parseFilter(kernelView(t, got, true, 3, 300), FlowPriority4, FlowPriority6)
		if id, mine := flowID(f.cookie); err != nil || !ok || !mine || id != g.id || f.handle != handleOf(g.slot, g.dir) ||
			f.rule != directionRule(g.key, g.dir, g.action) || f.counters != (tier.Counters{Packets: 3, Bytes: 300}) {
			t.Errorf("%s: decoded %+v ok=%v err=%v", g.name, f, ok, err)
		}
	}
	for _, d := range []struct {
		name   string
		handle uint32
		prio   uint16
		fam    uint16
	}{{"ft-del4", 1, FlowPriority4, ethPIP}, {"ft-del6", 2, FlowPriority6, ethPIPv6}} {
		want := golden(t, d.name)
		got, err := encodeDelAt(int(binary.NativeEndian.Uint32(want[20:])), d.handle, d.prio, d.fam)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[16:]) {
			t.Errorf("%s:\n got %x\nwant %x", d.name, got, want[16:])
		}
	}
	for _, d := range []struct {
		name string
		prio uint16
		fam  uint16
	}{{"ft-dump4", FlowPriority4, ethPIP}, {"ft-dump6", FlowPriority6, ethPIPv6}} {
		want := golden(t, d.name)
		// The poll's dump request: the same body and flags as tc's.
		got := tcmsg(int(binary.NativeEndian.Uint32(want[20:])), 0, parentIngress, d.prio, d.fam)
		if !bytes.Equal(got, want[16:]) || netlink.HeaderFlags(binary.NativeEndian.Uint16(want[6:])) != netlink.Request|netlink.Dump {
			t.Errorf("%s:\n got %x\nwant %x", d.name, got, want[16:])
		}
	}
}

func TestPacketCountPast32Bits(t *testing.T) {
	body, _ := encodeFilter(1, 1, FlowPriority4, directionRule(goldenFlows[0].key, 0, tier.FlowDiscard), flowCookie(1))
	f, _, err := parseFilter(kernelViewStats(t, body, true, func(s *netlink.AttributeEncoder) {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint64(b, 7<<32)
		binary.NativeEndian.PutUint32(b[8:], 5) // wrapped
		s.Bytes(statsBasic, b)
		s.Uint64(statsPkt64, 1<<32+5)
		b = append([]byte(nil), b...)
		binary.NativeEndian.PutUint32(b[8:], 6)
		s.Bytes(statsBasicHW, b)
		s.Uint64(statsPkt64, 1<<32+6)
	}), FlowPriority4)
	if err != nil || f.counters != (tier.Counters{Packets: 1<<32 + 6, Bytes: 7 << 32}) {
		t.Fatalf("%+v %v", f.counters, err)
	}
}

// flowKernel answers like rtnetlink for a flower-capable device with a
// filter limit, keying filters as the kernel does: priority, protocol,
// handle.
type flowKernel struct {
	t       *testing.T
	mu      sync.Mutex
	inHW    bool
	limit   int // filters the NIC holds; 0: no limit
	delErr  int // errno for deletions; 0: none
	filters map[fkey]*kfilter
	log     []string
}

type fkey struct {
	prio, proto uint16
	handle      uint32
}

type kfilter struct {
	body  []byte
	pkts  uint32
	bytes uint64
}

func newFlowKernel(t *testing.T) *flowKernel {
	return &flowKernel{t: t, inHW: true, filters: map[fkey]*kfilter{}}
}

func keyOf(b []byte) fkey {
	info := binary.NativeEndian.Uint32(b[16:])
	return fkey{prio: uint16(info >> 16), proto: htons(uint16(info)), handle: binary.NativeEndian.Uint32(b[8:])}
}

func (k *flowKernel) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	req := reqs[0]
	reply := func(ms ...netlink.Message) ([]netlink.Message, error) {
		for i := range ms {
			ms[i].Header.Sequence, ms[i].Header.PID = req.Header.Sequence, nltest.PID
		}
		return ms, nil
	}
	fk := keyOf(req.Data)
	logf := func(op string) { k.log = append(k.log, fmt.Sprintf("%s %#x/%d", op, fk.prio, fk.handle)) }
	if isFilterReq(req) && protoClash(k.filters, fk) {
		logf("EINVAL")
		return nltest.Error(int(unix.EINVAL), reqs)
	}
	switch req.Header.Type {
	case unix.RTM_NEWQDISC, unix.RTM_DELQDISC:
		return nltest.Error(0, reqs)
	case unix.RTM_NEWTFILTER:
		logf("add")
		if _, ok := k.filters[fk]; ok {
			return nltest.Error(int(unix.EEXIST), reqs)
		}
		if k.limit > 0 && len(k.filters) >= k.limit {
			return nltest.Error(int(unix.ENOSPC), reqs)
		}
		k.filters[fk] = &kfilter{body: req.Data}
		return nltest.Error(0, reqs)
	case unix.RTM_DELTFILTER:
		logf("del")
		if _, ok := k.filters[fk]; !ok {
			return nltest.Error(int(unix.ENOENT), reqs)
		}
		if k.delErr != 0 {
			return nltest.Error(k.delErr, reqs)
		}
		delete(k.filters, fk)
		return nltest.Error(0, reqs)
	case unix.RTM_GETTFILTER:
		if req.Header.Flags&netlink.Dump != 0 {
			logf("dump")
			var keys []fkey
			for fk2 := range k.filters {
				if (fk.prio == 0 || fk.prio == fk2.prio) && (fk.proto == 0 || fk.proto == fk2.proto) {
					keys = append(keys, fk2)
				}
			}
			sort.Slice(keys, func(i, j int) bool { return keys[i].handle < keys[j].handle })
			var ms []netlink.Message
			for _, fk2 := range keys {
				f := k.filters[fk2]
				ms = append(ms, netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER, Flags: netlink.Multi},
					Data: kernelView(k.t, f.body, k.inHW, f.pkts, f.bytes)})
			}
			ms = append(ms, netlink.Message{Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi}, Data: make([]byte, 4)})
			return reply(ms...)
		}
		logf("get")
		f, ok := k.filters[fk]
		if !ok {
			return nltest.Error(int(unix.ENOENT), reqs)
		}
		return reply(netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER}, Data: kernelView(k.t, f.body, k.inHW, f.pkts, f.bytes)})
	}
	k.t.Errorf("unexpected request type %d", req.Header.Type)
	return nltest.Error(int(unix.EINVAL), reqs)
}

// count adds packets of size bytes to direction dir of flow id's filter.
func (k *flowKernel) count(id uint64, dir int, packets uint32, size uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for fk, f := range k.filters {
		p, ok, _ := parseFilter(f.body, fk.prio)
		if fid, mine := flowID(p.cookie); ok && mine && fid == id && int((fk.handle-1)%2) == dir {
			f.pkts += packets
			f.bytes += uint64(packets) * size
			return
		}
	}
	k.t.Fatalf("no filter of flow %d direction %d", id, dir)
}

// ours is the flow filters in the kernel, by flow id.
func (k *flowKernel) ours() map[uint64]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[uint64]int{}
	for fk, f := range k.filters {
		p, ok, _ := parseFilter(f.body, fk.prio)
		if id, mine := flowID(p.cookie); ok && mine && (fk.prio == FlowPriority4 || fk.prio == FlowPriority6) {
			out[id]++
		}
	}
	return out
}

func (k *flowKernel) ops(op string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, l := range k.log {
		if strings.HasPrefix(l, op+" ") {
			n++
		}
	}
	return n
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func manualTable(t *testing.T, k *flowKernel, o FlowOptions) (*FlowTable, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	o.manual, o.now = true, c.now
	ft, err := openFlowTable(nltest.Dial(k.handle), "lo", o)
	if err != nil {
		t.Fatal(err)
	}
	return ft, c
}

func events(t *testing.T, ft *FlowTable) []tier.FlowEvent {
	t.Helper()
	buf := make([]tier.FlowEvent, 64)
	var out []tier.FlowEvent
	for {
		n, err := ft.Events(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

func one(t *testing.T, ft *FlowTable, kind tier.FlowEventKind, id uint64) tier.FlowEvent {
	t.Helper()
	evs := events(t, ft)
	if len(evs) != 1 || evs[0].Kind != kind || evs[0].ID != id {
		t.Fatalf("events %+v, want one %v of flow %d", evs, kind, id)
	}
	return evs[0]
}

var (
	flowA = key(unix.IPPROTO_TCP, "10.0.0.1:40000", "10.0.0.2:443")
	flowB = key(unix.IPPROTO_UDP, "[2001:db8::1]:5353", "[2001:db8::35]:53")
	flowC = key(unix.IPPROTO_UDP, "192.0.2.1:5353", "192.0.2.53:53")
)

func TestFlowLearnPollAndIdle(t *testing.T) {
	k := newFlowKernel(t)
	ft, clk := manualTable(t, k, FlowOptions{Capacity: 4, Poll: time.Second, IdleTimeout: 10 * time.Second})
	if c := ft.Caps(); !c.Directions || !c.Discard || c.Timeouts || c.Marks || c.TCPAutoUnlearn || c.Capacity != 4 {
		t.Fatalf("caps %+v", c)
	}
	learnAt := clk.now()
	if n, err := ft.Learn([]tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard, Options: tier.LearnOptions{TCPAutoUnlearn: true}},
		{ID: 2, Key: flowB, Action: tier.FlowForward}}); n != 2 || err != nil {
		t.Fatalf("learn: %d %v", n, err)
	}
	ft.step()
	evs := events(t, ft)
	if len(evs) != 2 || evs[0].Kind != tier.LearnDone || evs[1].Kind != tier.LearnDone || evs[0].ID != 1 || evs[1].ID != 2 {
		t.Fatalf("events %+v", evs)
	}
	if got := k.ours(); got[1] != 2 || got[2] != 2 || ft.Occupancy() != 2 {
		t.Fatalf("filters %v, occupancy %d", got, ft.Occupancy())
	}
	// The IPv4 flow at the IPv4 priority, the IPv6 one at the other.
	if _, ok := k.filters[fkey{FlowPriority4, ethPIP, 1}]; !ok {
		t.Fatalf("flow A not at %#x/1: %v", FlowPriority4, k.log)
	}
	if _, ok := k.filters[fkey{FlowPriority6, ethPIPv6, 4}]; !ok {
		t.Fatalf("flow B's reply direction not at %#x/4: %v", FlowPriority6, k.log)
	}

	// Traffic in both directions of A, one of B; a poll reads it.
	k.count(1, 0, 10, 100)
	k.count(1, 1, 5, 1400)
	k.count(2, 0, 3, 80)
	gets, dumps := k.ops("get"), k.ops("dump")
	clk.add(time.Second)
	ft.step()
	if n := k.ops("dump") - dumps; n != 2 {
		t.Fatalf("%d dumps in the first poll, want one per family", n)
	}
	if k.ops("get") != gets {
		t.Fatal("a poll read filters one by one")
	}
	c, err := ft.Read(1)
	if err != nil || c.Packets != [2]uint64{10, 5} || c.Bytes != [2]uint64{1000, 7000} || !c.First.Equal(learnAt) || !c.Last.Equal(clk.now()) {
		t.Fatalf("read A: %+v %v", c, err)
	}
	if _, err := ft.Read(99); !errors.Is(err, tier.ErrNoRule) {
		t.Fatalf("read unknown: %v", err)
	}

	// B keeps going, A falls silent: A is unlearned once idle 10s, with
	// what it counted per direction; B stays.
	lastA := clk.now()
	for i := 0; i < 12; i++ {
		k.count(2, 1, 1, 60)
		clk.add(time.Second)
		ft.step()
		if clk.now().Sub(lastA) < 10*time.Second {
			if evs := events(t, ft); len(evs) != 0 {
				t.Fatalf("at +%v: %+v", clk.now().Sub(lastA), evs)
			}
			continue
		}
		ev := one(t, ft, tier.Unlearned, 1)
		if ev.Cause != tier.CauseIdle || ev.Key != flowA || ev.Counters.Packets != [2]uint64{10, 5} ||
			ev.Counters.Bytes != [2]uint64{1000, 7000} || !ev.Counters.Last.Equal(lastA) {
			t.Fatalf("idle unlearn: %+v", ev)
		}
		break
	}
	if got := k.ours(); got[1] != 0 || got[2] != 2 || ft.Occupancy() != 1 {
		t.Fatalf("after ageing: filters %v occupancy %d", got, ft.Occupancy())
	}
	if c, _ := ft.Read(2); c.Packets != [2]uint64{3, 10} {
		t.Fatalf("B: %+v", c)
	}
	// Only one family has flows now: one dump a poll.
	d := k.ops("dump")
	clk.add(time.Second)
	ft.step()
	if k.ops("dump") != d+1 {
		t.Fatal("dumped a family without flows")
	}
}

func TestFlowLifetimeReadsCountersAtRemoval(t *testing.T) {
	k := newFlowKernel(t)
	ft, clk := manualTable(t, k, FlowOptions{Poll: time.Second, Lifetime: time.Hour})
	mustLearn(t, ft, []tier.Learn{{ID: 5, Key: flowC, Action: tier.FlowForward, Options: tier.LearnOptions{Lifetime: 3 * time.Second}}})
	ft.step()
	one(t, ft, tier.LearnDone, 5)
	for i := 0; i < 3; i++ {
		k.count(5, 0, 100, 1000)
		clk.add(time.Second)
		if i < 2 {
			ft.step()
			if evs := events(t, ft); len(evs) != 0 {
				t.Fatalf("%+v", evs)
			}
		}
	}
	// 100 packets since the last poll: the unlearn's read takes them in.
	ft.step()
	ev := one(t, ft, tier.Unlearned, 5)
	if ev.Cause != tier.CauseLifetime || ev.Counters.Packets != [2]uint64{300, 0} || ev.Counters.Bytes != [2]uint64{300000, 0} {
		t.Fatalf("lifetime: %+v", ev)
	}
	if len(k.ours()) != 0 {
		t.Fatal("filters left")
	}
}

func TestFlowUnlearnAndIgnored(t *testing.T) {
	k := newFlowKernel(t)
	ft, _ := manualTable(t, k, FlowOptions{})
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard},
		{ID: 1, Key: flowC, Action: tier.FlowDiscard},  // id again
		{ID: 2, Key: flowA, Action: tier.FlowDiscard}}) // key again
	ft.step()
	evs := events(t, ft)
	if len(evs) != 3 || evs[0].Kind != tier.LearnDone || evs[1].Kind != tier.LearnIgnored || !errors.Is(evs[1].Err, flowtab.ErrDuplicateID) ||
		evs[2].Kind != tier.LearnIgnored || !errors.Is(evs[2].Err, flowtab.ErrDuplicateKey) {
		t.Fatalf("%+v", evs)
	}
	k.count(1, 1, 2, 60)
	mustUnlearn(t, ft, []uint64{1, 1, 42})
	ft.step()
	evs = events(t, ft)
	if len(evs) != 3 || evs[0].Kind != tier.Unlearned || evs[0].Cause != tier.CauseApp || evs[0].Counters.Packets != [2]uint64{0, 2} ||
		evs[1].Kind != tier.LearnIgnored || !errors.Is(evs[1].Err, tier.ErrNoRule) ||
		evs[2].Kind != tier.LearnIgnored || evs[2].ID != 42 || !errors.Is(evs[2].Err, flowtab.ErrUnknownID) {
		t.Fatalf("%+v", evs)
	}
	if len(k.ours()) != 0 || ft.Occupancy() != 0 {
		t.Fatal("filters left")
	}
	// Invalid requests are refused whole, nothing queued.
	if n, err := ft.Learn([]tier.Learn{{ID: 3, Key: flowA, Action: 9}}); n != 0 || !errors.Is(err, tier.ErrInvalid) {
		t.Fatalf("invalid action: %d %v", n, err)
	}
	if n, err := ft.Learn([]tier.Learn{{ID: 3, Key: tier.FlowKey{Proto: 6, Lo: flowA.Hi, Hi: flowA.Lo}, Action: tier.FlowDiscard}}); n != 0 || !errors.Is(err, tier.ErrInvalid) {
		t.Fatalf("unsorted key: %d %v", n, err)
	}
}

func TestFlowTableFull(t *testing.T) {
	k := newFlowKernel(t)
	ft, _ := manualTable(t, k, FlowOptions{Capacity: 1})
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}, {ID: 2, Key: flowC, Action: tier.FlowDiscard}})
	ft.step()
	evs := events(t, ft)
	if len(evs) != 2 || evs[1].Kind != tier.LearnFailed || !errors.Is(evs[1].Err, tier.ErrTableFull) {
		t.Fatalf("%+v", evs)
	}
	// The NIC runs out before the configured capacity: the kernel's
	// ENOSPC on the second direction; the first goes again.
	k = newFlowKernel(t)
	ft, _ = manualTable(t, k, FlowOptions{Capacity: 8})
	k.limit = 3
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}, {ID: 2, Key: flowC, Action: tier.FlowDiscard}})
	ft.step()
	evs = events(t, ft)
	if len(evs) != 2 || evs[1].Kind != tier.LearnFailed || !errors.Is(evs[1].Err, tier.ErrTableFull) {
		t.Fatalf("%+v", evs)
	}
	if got := k.ours(); got[2] != 0 || got[1] != 2 || ft.Occupancy() != 1 {
		t.Fatalf("half-learned flow left: %v", got)
	}
}

func TestFlowNotInHardware(t *testing.T) {
	k := newFlowKernel(t)
	k.inHW = false
	if _, err := openFlowTable(nltest.Dial(k.handle), "lo", FlowOptions{manual: true}); !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("open: %v, want ErrUnsupported", err)
	}
	if len(k.filters) != 0 {
		t.Fatalf("probe left behind: %v", k.log)
	}
	k = newFlowKernel(t)
	ft, _ := manualTable(t, k, FlowOptions{})
	k.inHW = false
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}})
	ft.step()
	ev := one(t, ft, tier.LearnFailed, 1)
	if !errors.Is(ev.Err, tier.ErrNotInHardware) || len(k.filters) != 0 || ft.Occupancy() != 0 {
		t.Fatalf("%+v, filters %d", ev, len(k.filters))
	}
	// The slot went back: the next learn takes handles 1 and 2.
	k.inHW = true
	mustLearn(t, ft, []tier.Learn{{ID: 2, Key: flowA, Action: tier.FlowDiscard}})
	ft.step()
	one(t, ft, tier.LearnDone, 2)
	if _, ok := k.filters[fkey{FlowPriority4, ethPIP, 2}]; !ok {
		t.Fatalf("slot not reused: %v", k.log)
	}
}

func TestFlowCloseFlushes(t *testing.T) {
	k := newFlowKernel(t)
	ft, _ := manualTable(t, k, FlowOptions{})
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}, {ID: 2, Key: flowB, Action: tier.FlowDiscard}})
	ft.step()
	events(t, ft)
	k.count(1, 0, 7, 100)
	k.count(2, 1, 9, 100)
	mustLearn(t, ft, []tier.Learn{{ID: 3, Key: flowC, Action: tier.FlowDiscard}}) // never served
	if err := ft.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.Learn([]tier.Learn{{ID: 4, Key: flowC, Action: tier.FlowDiscard}}); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("learn after close: %v", err)
	}
	got := map[uint64]tier.FlowEvent{}
	for _, ev := range events(t, ft) {
		got[ev.ID] = ev
	}
	if e := got[1]; e.Kind != tier.Unlearned || e.Cause != tier.CauseFlush || e.Counters.Packets != [2]uint64{7, 0} {
		t.Fatalf("flow 1: %+v", e)
	}
	if e := got[2]; e.Kind != tier.Unlearned || e.Cause != tier.CauseFlush || e.Counters.Packets != [2]uint64{0, 9} {
		t.Fatalf("flow 2: %+v", e)
	}
	if e := got[3]; e.Kind != tier.LearnFailed || !errors.Is(e.Err, tier.ErrClosed) {
		t.Fatalf("flow 3: %+v", e)
	}
	if _, err := ft.Events(make([]tier.FlowEvent, 4)); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("events after drain: %v", err)
	}
	if len(k.filters) != 0 {
		t.Fatalf("filters left: %d", len(k.filters))
	}
}

func TestFlowLeftoversAndCoexistence(t *testing.T) {
	k := newFlowKernel(t)
	// An earlier probe's filters, someone else's at our priority, and
	// the mitigation table's rule.
	add := func(prio uint16, handle uint32, r tier.Rule, cookie []byte) {
		body, err := encodeFilter(1, handle, prio, r, cookie)
		if err != nil {
			t.Fatal(err)
		}
		k.filters[keyOf(body)] = &kfilter{body: body}
	}
	add(FlowPriority4, 1, directionRule(flowA, 0, tier.FlowDiscard), flowCookie(3))
	add(FlowPriority4, 2, directionRule(flowA, 1, tier.FlowDiscard), flowCookie(3))
	add(FlowPriority6, 7, directionRule(flowB, 0, tier.FlowForward), flowCookie(9))
	add(FlowPriority4, 100, directionRule(flowC, 0, tier.FlowForward), []byte("someone"))
	add(Priority, 5, goldenRules[0].rule, Cookie)
	ft, clk := manualTable(t, k, FlowOptions{})
	if st := ft.Stats(); st.Leftovers != 3 || st.Foreign != 1 || len(k.filters) != 2 {
		t.Fatalf("stats %+v, %d filters left", st, len(k.filters))
	}
	// The mitigation table re-adopts only its rule, and the flow table's
	// filters never show in its list.
	tb, err := open(nltest.Dial(k.handle), "lo", 4, false)
	if err != nil {
		t.Fatal(err)
	}
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}})
	ft.step()
	one(t, ft, tier.LearnDone, 1)
	es, err := tb.List(context.Background())
	if err != nil || len(es) != 1 || es[0].Rule != goldenRules[0].rule {
		t.Fatalf("mitigation list: %+v %v", es, err)
	}
	if _, err := tb.Install(context.Background(), goldenRules[2].rule); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Second)
	ft.step()
	if st := ft.Stats(); st.Strays != 0 || st.Orphans != 0 || ft.Occupancy() != 1 {
		t.Fatalf("poll disturbed by the other filters: %+v", st)
	}
}

func TestFlowOrphanAndFailedDelete(t *testing.T) {
	k := newFlowKernel(t)
	ft, clk := manualTable(t, k, FlowOptions{})
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}, {ID: 2, Key: flowC, Action: tier.FlowDiscard}})
	ft.step()
	events(t, ft)
	k.count(1, 0, 4, 100)
	clk.add(time.Second)
	ft.step()
	// An operator deletes one of flow 1's filters with tc.
	k.mu.Lock()
	delete(k.filters, fkey{FlowPriority4, ethPIP, 2})
	k.mu.Unlock()
	clk.add(time.Second)
	ft.step()
	ev := one(t, ft, tier.Unlearned, 1)
	if ev.Cause != tier.CauseFlush || ev.Counters.Packets != [2]uint64{4, 0} || ft.Stats().Orphans != 1 || k.ours()[1] != 0 {
		t.Fatalf("orphan: %+v %+v", ev, ft.Stats())
	}
	// A deletion the kernel refuses: no event until it succeeds.
	k.delErr = int(unix.EBUSY)
	mustUnlearn(t, ft, []uint64{2})
	ft.step()
	if evs := events(t, ft); len(evs) != 0 || ft.Stats().DeleteErrors != 1 || ft.Occupancy() != 1 {
		t.Fatalf("failed delete: %+v %+v", evs, ft.Stats())
	}
	k.delErr = 0
	clk.add(time.Second)
	ft.step()
	if ev := one(t, ft, tier.Unlearned, 2); ev.Cause != tier.CauseApp || len(k.ours()) != 0 {
		t.Fatalf("retried delete: %+v", ev)
	}
}

func TestFlowQueuesBounded(t *testing.T) {
	k := newFlowKernel(t)
	ft, _ := manualTable(t, k, FlowOptions{QueueLen: 2, EventQueueLen: 1})
	n, err := ft.Learn([]tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}, {ID: 2, Key: flowB, Action: tier.FlowDiscard},
		{ID: 3, Key: flowC, Action: tier.FlowDiscard}})
	if n != 2 || !errors.Is(err, tier.ErrQueueFull) || !strings.Contains(err.Error(), "2 of 3 queued") {
		t.Fatalf("learn: %d %v", n, err)
	}
	if n, err := ft.Unlearn([]uint64{1}); n != 0 || !errors.Is(err, tier.ErrQueueFull) {
		t.Fatalf("unlearn: %d %v", n, err)
	}
	// One event fits: one request served, then none until it is read.
	ft.step()
	ft.step()
	if ft.Occupancy() != 1 || ft.Stats().Stalls != 1 {
		t.Fatalf("occupancy %d stats %+v", ft.Occupancy(), ft.Stats())
	}
	one(t, ft, tier.LearnDone, 1)
	ft.step()
	one(t, ft, tier.LearnDone, 2)
}

func TestFlowWorker(t *testing.T) {
	k := newFlowKernel(t)
	ft, err := openFlowTable(nltest.Dial(k.handle), "lo", FlowOptions{Poll: 10 * time.Millisecond, IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mustLearn(t, ft, []tier.Learn{{ID: 1, Key: flowA, Action: tier.FlowDiscard}})
	var seen []tier.FlowEvent
	buf := make([]tier.FlowEvent, 8)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(seen) < 2; time.Sleep(5 * time.Millisecond) {
		n, _ := ft.Events(buf)
		seen = append(seen, buf[:n]...)
	}
	if len(seen) != 2 || seen[0].Kind != tier.LearnDone || seen[1].Kind != tier.Unlearned || seen[1].Cause != tier.CauseIdle {
		t.Fatalf("%+v", seen)
	}
	if err := ft.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.Events(buf); !errors.Is(err, tier.ErrClosed) {
		t.Fatal(err)
	}
}

func TestNoFlowerFlowTableOnThisKernel(t *testing.T) {
	// The real failure path: this kernel has no flower classifier.
	testutil.RequireRoot(t)
	const a, b = "twflt0", "twflt1"
	exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", a).Run()
	ft, err := OpenFlowTable(a, FlowOptions{})
	if err == nil {
		ft.Close()
		t.Skip("this kernel offloads flower on veth?")
	}
	if !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("open: %v, want ErrUnsupported", err)
	}
	out, _ := exec.Command("tc", "qdisc", "show", "dev", a).CombinedOutput()
	if strings.Contains(string(out), "clsact") {
		t.Errorf("clsact qdisc left behind: %s", out)
	}
	if _, err := OpenFlowTable("twflt-missing", FlowOptions{}); !errors.Is(err, tier.ErrUnsupported) {
		t.Errorf("missing interface: %v", err)
	}
	if _, err := OpenFlowTable(a, FlowOptions{Capacity: MaxFlowCapacity + 1}); !errors.Is(err, tier.ErrInvalid) {
		t.Errorf("capacity: %v", err)
	}
}

func mustLearn(t *testing.T, ft *FlowTable, reqs []tier.Learn) {
	t.Helper()
	if n, err := ft.Learn(reqs); n != len(reqs) || err != nil {
		t.Fatalf("learn: %d of %d queued: %v", n, len(reqs), err)
	}
}

func mustUnlearn(t *testing.T, ft *FlowTable, ids []uint64) {
	t.Helper()
	if n, err := ft.Unlearn(ids); n != len(ids) || err != nil {
		t.Fatalf("unlearn: %d of %d queued: %v", n, len(ids), err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// softwarePair is a veth pair with one end in a namespace: pings from
// there (10.77.0.2) reach twflsw0's ingress (10.77.0.1), where the tables
// under test sit. It skips where the kernel has no cls_flower (6.18 here;
// Debian's kernels have it, and the VM test requires it).
func softwarePair(t *testing.T) (iface string) {
	t.Helper()
	testutil.RequireRoot(t)
	_ = exec.Command("modprobe", "cls_flower").Run()
	_ = exec.Command("modprobe", "act_gact").Run()
	const a, b, ns = "twflsw0", "twflsw1", "twflsw"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "link", "del", a).Run()
	_ = exec.Command("ip", "netns", "del", ns).Run()
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", a).Run() })
	run("ip", "addr", "add", "10.77.0.1/24", "dev", a)
	run("ip", "link", "set", a, "up")
	run("ip", "-n", ns, "addr", "add", "10.77.0.2/24", "dev", b)
	run("ip", "-n", ns, "link", "set", b, "up")
	run("ip", "-n", ns, "link", "set", "lo", "up")
	// Probe for the classifier as an operator would.
	out, err := exec.Command("tc", "qdisc", "add", "dev", a, "clsact").CombinedOutput()
	if err != nil {
		t.Fatalf("clsact: %v: %s", err, out)
	}
	probe := exec.Command("tc", "filter", "add", "dev", a, "ingress", "protocol", "ip", "pref", "1", "flower", "skip_hw", "src_ip", "192.0.2.1", "action", "drop")
	have := probe.Run() == nil
	_ = exec.Command("tc", "qdisc", "del", "dev", a, "clsact").Run()
	testutil.RequireKernel(t, "flower", have, "tc cls_flower")
	return a
}

// pings says whether the namespace reaches 10.77.0.1 (3 pings).
func pings(t *testing.T) bool {
	t.Helper()
	return exec.Command("ip", "netns", "exec", "twflsw", "ping", "-c", "3", "-i", "0.2", "-W", "1", "-q", "10.77.0.1").Run() == nil
}

// The mitigation table against the real cls_flower, in software: install,
// drop, count, re-adopt on open, remove with the last counters, flush.
func TestSoftwareFlowerOnThisKernel(t *testing.T) {
	iface := softwarePair(t)
	if !pings(t) {
		t.Fatal("no ping before any rule")
	}
	tb, err := OpenSoftware(iface, 8)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ctx := context.Background()
	src := tier.SourceMatch(netip.MustParseAddr("10.77.0.2"))
	if _, err := tb.Install(ctx, tier.Rule{Match: src, Action: tier.Drop}); err != nil {
		t.Fatalf("install: %v", err)
	}
	if pings(t) {
		t.Error("pings pass a drop rule")
	}
	es, err := tb.List(ctx)
	if err != nil || len(es) != 1 || es[0].Rule.Match != src {
		t.Fatalf("list: %+v, %v", es, err)
	}
	// Software rules count in the combined stats (the hardware ones
	// stay 0): 3 echo requests at least.
	if es[0].Counters.Packets < 3 || es[0].Counters.Bytes < 3*84 {
		t.Errorf("counters %+v after 3 dropped pings", es[0].Counters)
	}
	tb.Close()

	// A restart re-adopts the rule, counters and all.
	tb, err = OpenSoftware(iface, 8)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer tb.Close()
	es, err = tb.List(ctx)
	if err != nil || len(es) != 1 || es[0].Counters.Packets < 3 {
		t.Fatalf("re-adopted: %+v, %v", es, err)
	}
	if _, err := tb.Install(ctx, tier.Rule{Match: src, Action: tier.Drop}); err != nil {
		t.Errorf("install of the re-adopted match (a no-op): %v", err)
	}
	if es, _ := tb.List(ctx); len(es) != 1 {
		t.Errorf("after the no-op install: %+v", es)
	}
	last, _, err := tb.Remove(ctx, src)
	if err != nil || last.Packets < 3 {
		t.Fatalf("remove: %+v, %v", last, err)
	}
	if !pings(t) {
		t.Error("no ping once the rule is removed")
	}
	if es, _ := tb.List(ctx); len(es) != 0 {
		t.Errorf("left after remove: %+v", es)
	}
}

// The flow table against the real cls_flower, in software: a learned
// discard drops the flow and counts it, an unlearn reports its counters.
func TestSoftwareFlowTableOnThisKernel(t *testing.T) {
	iface := softwarePair(t)
	ft, err := OpenFlowTable(iface, FlowOptions{Software: true, Capacity: 16, Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer ft.Close()
	key := tier.FlowKey{Proto: unix.IPPROTO_ICMP, Lo: netip.MustParseAddrPort("10.77.0.1:0"), Hi: netip.MustParseAddrPort("10.77.0.2:0")}
	mustLearn(t, ft, []tier.Learn{{ID: 7, Key: key, Action: tier.FlowDiscard}})
	ev := waitEvent(t, ft, tier.LearnDone)
	if ev.ID != 7 {
		t.Fatalf("learn: %+v", ev)
	}
	if pings(t) {
		t.Error("pings pass a learned discard")
	}
	deadline := time.Now().Add(5 * time.Second)
	var c tier.FlowCounters
	for time.Now().Before(deadline) {
		if c, err = ft.Read(7); err == nil && c.Packets[0]+c.Packets[1] >= 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.Packets[0]+c.Packets[1] < 3 {
		t.Errorf("flow counters %+v after 3 discarded pings (%v)", c, err)
	}
	mustUnlearn(t, ft, []uint64{7})
	ev = waitEvent(t, ft, tier.Unlearned)
	if ev.ID != 7 || ev.Counters.Packets[0]+ev.Counters.Packets[1] < 3 {
		t.Errorf("unlearned: %+v", ev)
	}
	if !pings(t) {
		t.Error("no ping once the flow is unlearned")
	}
}

func waitEvent(t *testing.T, ft *FlowTable, kind tier.FlowEventKind) tier.FlowEvent {
	t.Helper()
	buf := make([]tier.FlowEvent, 8)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := ft.Events(buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range buf[:n] {
			if ev.Kind == kind {
				return ev
			}
			if ev.Kind == tier.LearnFailed {
				t.Fatalf("learn failed: %+v", ev)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %v event", kind)
	return tier.FlowEvent{}
}

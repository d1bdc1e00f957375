// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

func mustRule(t *testing.T, s string) rule.FlowRule {
	t.Helper()
	r, err := rule.ParseFlowRule(strings.Fields(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func policerCounters(t *testing.T, n *Stage) map[rule.FlowRule]tier.PolicerCounters {
	t.Helper()
	cs, err := n.PolicerCounters()
	if err != nil {
		t.Fatal(err)
	}
	out := map[rule.FlowRule]tier.PolicerCounters{}
	for _, c := range cs {
		out[c.Rule] = c
	}
	return out
}

func TestPolicers(t *testing.T) {
	testutil.RequireRoot(t)
	n, err := LoadDetached(Options{Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	drop := mustRule(t, "dst 192.0.2.1/32 proto udp dport 9 drop")
	limit := mustRule(t, "dst 192.0.2.2/32 proto udp rate-limit 1")
	if err := n.SetPolicers([]rule.FlowRule{drop, limit}); err != nil {
		t.Fatal(err)
	}
	mapped := pkt.Frame{Src: netip.MustParseAddr("2001:db8::7"), Dst: netip.MustParseAddr("::ffff:192.0.2.1"),
		Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 9, Payload: []byte("nic-test")}
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"the drop rule's shape", nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoUDP, 1000, 9), xdpDrop},
		// An IPv6 packet to a mapped address is a packet to the IPv4
		// address for a dual-stack socket: the filter's rule catches
		// it, and so must the card's copy of it.
		{"the same to its IPv4-mapped address", mapped.Build(), xdpDrop},
		{"another port", nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoUDP, 1000, 10), xdpPass},
		{"another protocol", nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoTCP, 1000, 9), xdpPass},
		{"another destination", nicFrame("198.51.100.1", "192.0.2.3", pkt.ProtoUDP, 1000, 9), xdpPass},
	} {
		if got := runNIC(t, n, c.frame); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}

	// At 1 packet/s the bucket holds one packet: the first of a burst
	// passes, the rest are dropped (the run takes far less than a second).
	const burst = 20
	dropped := 0
	limited := nicFrame("198.51.100.1", "192.0.2.2", pkt.ProtoUDP, 1000, 53)
	for range burst {
		if runNIC(t, n, limited) == xdpDrop {
			dropped++
		}
	}
	if dropped < burst-2 || dropped == burst {
		t.Errorf("rate-limit at 1/s: %d of %d dropped, want all but the bucket's one or two", dropped, burst)
	}
	cs := policerCounters(t, n)
	if c := cs[drop]; c.Matched.Packets != 2 || c.Dropped != 2 {
		t.Errorf("drop policer counters %+v, want 2 matched, 2 dropped", c)
	}
	if c := cs[limit]; c.Matched.Packets != burst || c.Dropped != uint64(dropped) {
		t.Errorf("rate-limit policer counters %+v, want %d matched, %d dropped", c, burst, dropped)
	}
	st, err := n.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if got := st["hit_drop"].Packets; got != uint64(2+dropped) {
		t.Errorf("hit_drop %d, want the policers' %d drops", got, 2+dropped)
	}

	// A swap keeps a kept policer's counters wherever it moves; a new one
	// starts at zero.
	other := mustRule(t, "dst 192.0.2.0/24 proto udp dport 9-10 drop")
	if err := n.SetPolicers([]rule.FlowRule{limit, other}); err != nil {
		t.Fatal(err)
	}
	cs = policerCounters(t, n)
	if len(cs) != 2 || cs[limit].Matched.Packets != burst || cs[other].Matched.Packets != 0 {
		t.Errorf("after the swap: %+v, want the rate-limit policer's %d and a new one at 0", cs, burst)
	}
	if got := runNIC(t, n, nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoUDP, 1000, 10)); got != xdpDrop {
		t.Errorf("the new policer's shape: verdict %d, want drop", got)
	}

	// What the card cannot do is refused, and the set in force stays.
	for _, bad := range [][]rule.FlowRule{
		{mustRule(t, "dst 192.0.2.1/32 proto tcp dport 80 syn-cookie")},
		{mustRule(t, "dst 192.0.2.1/32 proto udp dport 9 rate-limit 1000 bypass-known-good")},
		{other, other},
	} {
		if err := n.SetPolicers(bad); !errors.Is(err, tier.ErrInvalid) {
			t.Errorf("SetPolicers(%v): %v, want ErrInvalid", bad, err)
		}
	}
	many := make([]rule.FlowRule, polMax+1)
	for i := range many {
		many[i] = mustRule(t, "dst 192.0.2.1/32 proto udp drop")
		many[i].DstPorts = rule.PortRange{Lo: uint16(i + 1), Hi: uint16(i + 1)}
	}
	if err := n.SetPolicers(many); !errors.Is(err, tier.ErrTableFull) {
		t.Errorf("%d policers: %v, want ErrTableFull", len(many), err)
	}
	if cs := policerCounters(t, n); len(cs) != 2 {
		t.Errorf("after refusals: %d policers, want the 2 in force", len(cs))
	}

	tbl := NewTable(n)
	if err := tbl.SetPolicers(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := runNIC(t, n, nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoUDP, 1000, 9)); got != xdpPass {
		t.Errorf("no policers: verdict %d, want pass", got)
	}
	if cs, err := tbl.PolicerCounters(context.Background()); err != nil || len(cs) != 0 {
		t.Errorf("no policers: %v, %v", cs, err)
	}
}

// Policers are pinned with the stage: the daemon's Open sets them, a
// re-attach keeps them. A stage pinned by a tierwall without policers
// gets empty ones when it is re-adopted, and keeps its table.
func TestPolicersPinnedAndAdopted(t *testing.T) {
	testutil.RequireRoot(t)
	ns := vethNetns(t, "twnp", "w", "h")
	root := t.TempDir()
	if err := exec.Command("mount", "-t", "bpf", "bpf", root).Run(); err != nil { // a bpffs of the test's own
		t.Fatalf("mounting a bpffs at %s: %v", root, err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", root).Run() })
	drop := mustRule(t, "dst 192.0.2.1/32 proto udp dport 9 drop")
	src := tier.Rule{Match: tier.SourceMatch(netip.MustParseAddr("203.0.113.9")), Action: tier.Drop}
	err := netnsx.Do(ns, -1, func() error {
		n, err := Attach("twnpw0", "twnph0", Options{Capacity: 8, PinRoot: root})
		if err != nil {
			return err
		}
		n.Close()
		o, err := Open("twnpw0", root)
		if err != nil {
			return err
		}
		if err := o.SetPolicers([]rule.FlowRule{drop}); err != nil {
			return err
		}
		if _, err := o.Insert(src); err != nil {
			return err
		}
		o.Close()
		n, err = Attach("twnpw0", "twnph0", Options{PinRoot: root})
		if err != nil {
			return err
		}
		cs, err := n.PolicerCounters()
		n.Close()
		if err != nil || len(cs) != 1 || cs[0].Rule != drop {
			return fmt.Errorf("after re-attach: policers %v, %v; want %s", cs, err, drop)
		}

		// As a tierwall without policers left it: their pins gone.
		dir := bpffs.NICDir(root, "twnpw0")
		for _, name := range polPinned {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		if o, err := Open("twnpw0", root); err != nil {
			return err
		} else if err := o.SetPolicers(nil); !errors.Is(err, tier.ErrUnsupported) {
			o.Close()
			return fmt.Errorf("Open of a stage without policers: SetPolicers %v, want ErrUnsupported", err)
		} else {
			o.Close()
		}
		n, err = Attach("twnpw0", "twnph0", Options{PinRoot: root})
		if err != nil {
			return fmt.Errorf("re-adopting a stage pinned without policers: %w", err)
		}
		rules, err := n.Rules()
		n.Close()
		if err != nil || len(rules) != 1 {
			return fmt.Errorf("the table after re-adoption: %v, %v; want the source rule", rules, err)
		}
		o, err = Open("twnpw0", root)
		if err != nil {
			return err
		}
		defer o.Close()
		if cs, err := o.PolicerCounters(); err != nil || len(cs) != 0 {
			return fmt.Errorf("fresh policers: %v, %v; want none", cs, err)
		}
		if err := o.SetPolicers([]rule.FlowRule{drop}); err != nil {
			return fmt.Errorf("policers on the re-adopted stage: %w", err)
		}
		return Detach("twnpw0", root)
	})
	if err != nil {
		t.Fatal(err)
	}
}

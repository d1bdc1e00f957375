// SPDX-License-Identifier: Apache-2.0

// Package nicstage is tierwall's emulated SmartNIC (bpf/nic/xdp_nic.c): a
// bump-in-the-wire XDP stage with an exact-match table of capacity K,
// attached to the wire-facing port of a "nic" network namespace and
// redirecting what it does not drop to the host-facing port. Its control
// path enforces a per-update latency, like a NIC's firmware, so placement
// meets the same budget as on real hardware. Table adapts it to
// tier.Table: tests, benchmarks and the demo use it because these machines
// have no SmartNIC.
package nicstage

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
)

// NIC defaults: the paper's card held 512-2K rules at ~2 ms per update.
const (
	DefaultCapacity = 512
	DefaultLatency  = 2 * time.Millisecond
)

// Mode is what the emulated NIC does with a packet, one per approach
// of the paper's evaluation (the host side decides whether its own XDP
// filter runs):
//
//	hybrid  hardware table, misses to the host's XDP filter (the paper's best)
//	nic-hw  hardware table, misses to the filter on the NIC CPU
//	nic     everything through the filter on the NIC CPU
//	wire    nothing: a plain wire (the "host" approach: XDP only)
type Mode string

const (
	Hybrid Mode = "hybrid"
	HW     Mode = "nic-hw"
	CPU    Mode = "nic"
	Wire   Mode = "wire"
)

// modeFlags is each mode's data-plane flags, read both ways: a mode
// becomes its flags at attach, and pinned flags read back as their mode.
var modeFlags = map[Mode]nicTwNicFlags{
	Hybrid: nicTwNicFlagsTW_NIC_F_TABLE,
	HW:     nicTwNicFlagsTW_NIC_F_TABLE | nicTwNicFlagsTW_NIC_F_CPU,
	CPU:    nicTwNicFlagsTW_NIC_F_CPU,
	Wire:   0,
}

func (m Mode) flags() (nicTwNicFlags, error) {
	if m == "" {
		m = Hybrid
	}
	if f, ok := modeFlags[m]; ok {
		return f, nil
	}
	return 0, fmt.Errorf("%w: NIC mode %q (want hybrid, nic-hw, nic or wire)", datapath.ErrInvalid, m)
}

// nicModeOf is the mode of flags f; flags of no mode are a wire.
func nicModeOf(f nicTwNicFlags) Mode {
	for m, mf := range modeFlags {
		if mf == f {
			return m
		}
	}
	return Wire
}

// Options configure a new emulated NIC; when pinned state is re-adopted
// zero fields take the pinned values.
type Options struct {
	Capacity      int
	UpdateLatency time.Duration
	Mode          Mode
	// CPURate caps the packets per second the NIC CPU path (modes nic and
	// nic-hw) can filter, modelling a NIC CPU slower than the host; 0: no
	// cap. Packets over it are dropped unfiltered and counted.
	CPURate uint64
	PinRoot string // bpffs mount override (tests)
}

// Stage is a handle on an emulated NIC stage.
type Stage struct {
	Iface string // wire-facing port the stage is attached to
	Dir   string

	mu      sync.Mutex
	objs    nicObjects
	cap     int
	latency time.Duration
	ids     map[tier.Match]uint32
	free    []uint32
	// sleep waits out the firmware's update latency; tests replace it to
	// see what was waited without depending on the clock.
	sleep func(time.Duration)
}

func (n *Stage) wait() {
	if n.sleep != nil {
		n.sleep(n.latency)
		return
	}
	time.Sleep(n.latency)
}

var nicPinned = []string{"tw_nic_rules", "tw_nic_ctr", "tw_nic_stats", "tw_nic_cfg", "tw_nic_cpu", "tw_nic_bucket"}

// LoadDetached loads the NIC stage with fresh maps, attached nowhere and
// passing misses up (host port 0): for BPF_PROG_TEST_RUN.
func LoadDetached(o Options) (*Stage, error) {
	return loadNIC(o, 0)
}

func loadNIC(o Options, hostIndex int) (*Stage, error) {
	if o.Capacity == 0 {
		o.Capacity = DefaultCapacity
	}
	if o.UpdateLatency == 0 {
		o.UpdateLatency = DefaultLatency
	}
	if o.Capacity < 1 || o.Capacity > 1<<16 {
		return nil, fmt.Errorf("%w: NIC capacity %d out of range 1..65536", datapath.ErrInvalid, o.Capacity)
	}
	if o.UpdateLatency < 0 || o.UpdateLatency > time.Second {
		return nil, fmt.Errorf("%w: NIC update latency %v out of range 0..1s", datapath.ErrInvalid, o.UpdateLatency)
	}
	flags, err := o.Mode.flags()
	if err != nil {
		return nil, err
	}
	spec, err := nicSpec(uint32(o.Capacity))
	if err != nil {
		return nil, err
	}
	n := &Stage{cap: o.Capacity, latency: o.UpdateLatency}
	if err := spec.LoadAndAssign(&n.objs, nil); err != nil {
		return nil, fmt.Errorf("loading NIC stage: %w", err)
	}
	cfg := nicTwNicConfig{HostIfindex: uint32(hostIndex), Capacity: uint32(o.Capacity), LatencyUs: uint32(o.UpdateLatency / time.Microsecond),
		Flags: flags, CpuRatePps: o.CPURate}
	if err := n.objs.TwNicCfg.Put(uint32(0), &cfg); err != nil {
		n.objs.Close()
		return nil, fmt.Errorf("writing NIC config: %w", err)
	}
	if err := n.objs.TwNicPol.Put(uint32(0), n.objs.TwNicPolA); err != nil {
		n.objs.Close()
		return nil, fmt.Errorf("setting the policers' bank: %w", err)
	}
	n.initIDs(nil)
	return n, nil
}

// nicSpec is the NIC program's spec sized for capacity K.
func nicSpec(capacity uint32) (*ebpf.CollectionSpec, error) {
	spec, err := loadNic()
	if err != nil {
		return nil, fmt.Errorf("loading NIC spec: %w", err)
	}
	spec.Maps["tw_nic_rules"].MaxEntries = capacity
	spec.Maps["tw_nic_ctr"].MaxEntries = capacity
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["tw_nic_ncpu"].Set(uint32(ncpu)); err != nil {
		return nil, fmt.Errorf("setting tw_nic_ncpu: %w", err)
	}
	return spec, nil
}

func (n *Stage) initIDs(used map[uint32]bool) {
	n.ids = map[tier.Match]uint32{}
	n.free = n.free[:0]
	for id := n.cap - 1; id >= 0; id-- {
		if !used[uint32(id)] {
			n.free = append(n.free, uint32(id))
		}
	}
}

// Attach puts the NIC stage on wire, redirecting misses to host (both
// in the current network namespace). Pinned state is re-adopted with its
// rules and counters.
func Attach(wire, host string, o Options) (_ *Stage, err error) {
	wi, err := net.InterfaceByName(wire)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, wire)
	}
	hi, err := net.InterfaceByName(host)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, host)
	}
	root := o.PinRoot
	if root == "" {
		if root, err = bpffs.Root(); err != nil {
			return nil, err
		}
	}
	dir := bpffs.NICDir(root, wire)
	lk, err := bpffs.Lock(dir)
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if bpffs.Exists(dir) {
		return adoptNIC(wi, hi, dir, o)
	}

	n, err := loadNIC(o, hi.Index)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.Iface, n.Dir = wire, dir
	tmp := filepath.Join(filepath.Dir(dir), fmt.Sprintf("tmp:%s:%d", bpffs.PinName(wire), os.Getpid()))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", tmp, err)
	}
	defer os.RemoveAll(tmp)
	for name, m := range n.mapsByName() {
		if err := m.Pin(filepath.Join(tmp, name)); err != nil {
			return nil, fmt.Errorf("pinning %s: %w", name, err)
		}
	}
	// Native XDP: veth supports it, and redirecting xdp_frames from it is
	// what makes the stage cost what a NIC's fast path would.
	lnk, err := link.AttachXDP(link.XDPOptions{Program: n.objs.TwNic, Interface: wi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return nil, fmt.Errorf("attaching NIC stage to %s: %w", wire, err)
	}
	defer lnk.Close()
	if err := lnk.Pin(filepath.Join(tmp, bpffs.LinkPin)); err != nil {
		return nil, fmt.Errorf("pinning NIC link: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("publishing %s: %w", dir, err)
	}
	return n, nil
}

func (n *Stage) mapsByName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"tw_nic_rules": n.objs.TwNicRules, "tw_nic_ctr": n.objs.TwNicCtr,
		"tw_nic_stats": n.objs.TwNicStats, "tw_nic_cfg": n.objs.TwNicCfg, "tw_nic_cpu": n.objs.TwNicCpu,
		"tw_nic_bucket": n.objs.TwNicBucket, "tw_nic_pol": n.objs.TwNicPol, "tw_nic_pol_a": n.objs.TwNicPolA,
		"tw_nic_pol_b": n.objs.TwNicPolB, "tw_nic_pol_ctr": n.objs.TwNicPolCtr, "tw_nic_pol_tb": n.objs.TwNicPolTb}
}

func adoptNIC(wi, hi *net.Interface, dir string, o Options) (_ *Stage, err error) {
	pinned := map[string]*ebpf.Map{}
	defer func() {
		if err != nil {
			for _, m := range pinned {
				m.Close()
			}
		}
	}()
	for _, name := range nicPinned {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("%w: loading pinned %s: %v (detach the NIC stage to recreate)", datapath.ErrIncompatible, name, err)
		}
		pinned[name] = m
	}
	pol, err := loadPinnedPolicers(dir)
	if err != nil {
		return nil, err
	}
	for name, m := range pol {
		pinned[name] = m
	}
	var cfg nicTwNicConfig
	if err := pinned["tw_nic_cfg"].Lookup(uint32(0), &cfg); err != nil {
		return nil, fmt.Errorf("reading pinned NIC config: %w", err)
	}
	if o.Capacity != 0 && uint32(o.Capacity) != cfg.Capacity {
		return nil, fmt.Errorf("%w: NIC capacity %d asked, %d pinned; detach first", datapath.ErrIncompatible, o.Capacity, cfg.Capacity)
	}
	if o.Mode != "" {
		f, err := o.Mode.flags()
		if err != nil {
			return nil, err
		}
		cfg.Flags = f
	}
	if o.CPURate != 0 {
		cfg.CpuRatePps = o.CPURate
	}
	spec, err := nicSpec(cfg.Capacity)
	if err != nil {
		return nil, err
	}
	n := &Stage{Iface: wi.Name, Dir: dir, cap: int(cfg.Capacity), latency: time.Duration(cfg.LatencyUs) * time.Microsecond}
	if o.UpdateLatency != 0 {
		n.latency = o.UpdateLatency
	}
	if err := spec.LoadAndAssign(&n.objs, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		return nil, fmt.Errorf("%w: pinned NIC maps do not fit this tierwall: %v", datapath.ErrIncompatible, err)
	}
	for _, m := range pinned {
		m.Close() // the objects hold their own references now
	}
	pinned = nil
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if len(pol) == 0 {
		// Pinned by a tierwall without policers: the stage gets them
		// now, empty (its config's pol_n, a pad then, is 0).
		if err := n.pinPolicers(dir); err != nil {
			return nil, err
		}
	}
	cfg.HostIfindex = uint32(hi.Index)
	cfg.LatencyUs = uint32(n.latency / time.Microsecond)
	if err := n.objs.TwNicCfg.Put(uint32(0), &cfg); err != nil {
		return nil, fmt.Errorf("writing NIC config: %w", err)
	}
	if err := n.loadIDs(); err != nil {
		return nil, err
	}
	lp := filepath.Join(dir, bpffs.LinkPin)
	updated, _, err := bpffs.UpdatePinnedLink(lp, n.objs.TwNic, wi.Index)
	if err != nil {
		return nil, err
	}
	if updated {
		return n, nil
	}
	lnk, err := link.AttachXDP(link.XDPOptions{Program: n.objs.TwNic, Interface: wi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return nil, fmt.Errorf("attaching NIC stage to %s: %w", wi.Name, err)
	}
	defer lnk.Close()
	if err := lnk.Pin(lp); err != nil {
		return nil, fmt.Errorf("pinning NIC link: %w", err)
	}
	return n, nil
}

// loadIDs rebuilds the rule-id allocation from the pinned rules.
func (n *Stage) loadIDs() error {
	used := map[uint32]bool{}
	var k nicTwNicKey
	var r nicTwNicRule
	matches := map[tier.Match]uint32{}
	it := n.objs.TwNicRules.Iterate()
	for it.Next(&k, &r) {
		used[r.Id] = true
		matches[nicMatch(k)] = r.Id
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading NIC rules: %w", err)
	}
	n.initIDs(used)
	n.ids = matches
	return nil
}

// Detach removes the NIC stage from wire and its pinned state.
func Detach(wire, pinRoot string) error {
	root := pinRoot
	if root == "" {
		var err error
		if root, err = bpffs.Root(); err != nil {
			return err
		}
	}
	dir := bpffs.NICDir(root, wire)
	lk, err := bpffs.Lock(dir)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if !bpffs.Exists(dir) {
		return fmt.Errorf("%w: no NIC stage on %s", datapath.ErrNotAttached, wire)
	}
	if l, err := link.LoadPinnedLink(filepath.Join(dir, bpffs.LinkPin), nil); err == nil {
		_ = l.Unpin() // RemoveAll below deletes the pin too, and reports it if it cannot
		l.Close()
	}
	return os.RemoveAll(dir)
}

// Program is the NIC stage's program (for BPF_PROG_TEST_RUN).
func (n *Stage) Program() *ebpf.Program { return n.objs.TwNic }

// MatchTable is a stage's match table (bpf/lib/nic.h) for another
// program to run: the lab's generator does (gen.GenSpec.Card).
type MatchTable struct{ maps map[string]*ebpf.Map }

// MatchTable returns the stage's match table: its rules, their counters,
// the verdict counters and the configuration. Valid while n is open.
func (n *Stage) MatchTable() *MatchTable {
	return &MatchTable{maps: map[string]*ebpf.Map{"tw_nic_rules": n.objs.TwNicRules, "tw_nic_ctr": n.objs.TwNicCtr,
		"tw_nic_stats": n.objs.TwNicStats, "tw_nic_cfg": n.objs.TwNicCfg}}
}

// Maps are the table's maps by their names in bpf/lib/nic.h.
func (t *MatchTable) Maps() map[string]*ebpf.Map { return t.maps }

// Capacity is K.
func (n *Stage) Capacity() int { return n.cap }

// UpdateLatency is the emulated per-update latency.
func (n *Stage) UpdateLatency() time.Duration { return n.latency }

// Close releases this process's handles; the stage keeps running.
func (n *Stage) Close() error { return n.objs.Close() }

func nicKey(m tier.Match) nicTwNicKey {
	var k nicTwNicKey
	if m.Src.Is4() {
		k.Family = 4
		a := m.Src.As4()
		copy(k.Src[:], a[:])
		if m.IsFlow() {
			d := m.Dst.As4()
			copy(k.Dst[:], d[:])
		}
	} else {
		k.Family = 6
		k.Src = m.Src.As16()
		if m.IsFlow() {
			k.Dst = m.Dst.As16()
		}
	}
	if m.IsFlow() {
		k.Proto = m.Proto
		k.Sport, k.Dport = htons(m.SrcPort), htons(m.DstPort)
	}
	return k
}

func nicMatch(k nicTwNicKey) tier.Match {
	var m tier.Match
	if k.Family == 4 {
		m.Src = netipFrom4(k.Src)
		if k.Proto != 0 {
			m.Dst = netipFrom4(k.Dst)
		}
	} else {
		m.Src = netipFrom16(k.Src)
		if k.Proto != 0 {
			m.Dst = netipFrom16(k.Dst)
		}
	}
	if k.Proto != 0 {
		m.Proto = k.Proto
		m.SrcPort, m.DstPort = htons(k.Sport), htons(k.Dport)
	}
	return m
}

// htons swaps to network order as the data plane stores ports (this is a
// little-endian-only build: bpf2go targets bpfel).
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Insert writes a rule after the emulated update latency and confirms it
// by reading it back. Installing a rule that is already there with the same
// action is a no-op.
func (n *Stage) Insert(r tier.Rule) (time.Duration, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	start := time.Now()
	k := nicKey(r.Match)
	var cur nicTwNicRule
	if err := n.objs.TwNicRules.Lookup(&k, &cur); err == nil {
		if cur.Action == nicTwNicAction(r.Action) {
			return 0, nil
		}
		n.wait()
		cur.Action = nicTwNicAction(r.Action)
		if err := n.objs.TwNicRules.Update(&k, &cur, ebpf.UpdateExist); err != nil {
			return 0, fmt.Errorf("changing NIC rule %s: %w", r.Match, err)
		}
		return time.Since(start), nil
	}
	if len(n.free) == 0 {
		return 0, fmt.Errorf("%w: %d of %d rules in use", tier.ErrTableFull, n.cap-len(n.free), n.cap)
	}
	id := n.free[len(n.free)-1]
	n.wait()
	// Fresh counters first, so the rule never shows its predecessor's.
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, err
	}
	if err := n.objs.TwNicCtr.Put(id, make([]nicTwCtr, ncpu)); err != nil {
		return 0, fmt.Errorf("resetting NIC counters: %w", err)
	}
	rule := nicTwNicRule{Action: nicTwNicAction(r.Action), Id: id}
	if err := n.objs.TwNicRules.Update(&k, &rule, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) || isE2BIG(err) {
			return 0, fmt.Errorf("%w: %v", tier.ErrTableFull, err)
		}
		return 0, fmt.Errorf("installing NIC rule %s: %w", r.Match, err)
	}
	var back nicTwNicRule
	if err := n.objs.TwNicRules.Lookup(&k, &back); err != nil || back != rule {
		return 0, fmt.Errorf("%w: %s (read back: %v)", tier.ErrNotInHardware, r.Match, err)
	}
	n.free = n.free[:len(n.free)-1]
	n.ids[r.Match] = id
	if r.Match.IsFlow() {
		if err := n.bumpFlows(1); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// Delete removes the rule for m after the emulated update latency and
// returns its counters as read after the removal: nothing it dropped is
// lost from the accounting.
func (n *Stage) Delete(m tier.Match) (tier.Counters, time.Duration, error) {
	var last tier.Counters
	if err := m.Validate(); err != nil {
		return last, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	start := time.Now()
	k := nicKey(m)
	var cur nicTwNicRule
	if err := n.objs.TwNicRules.Lookup(&k, &cur); err != nil {
		return last, 0, fmt.Errorf("%w: %s", tier.ErrNoRule, m)
	}
	n.wait()
	if err := n.objs.TwNicRules.Delete(&k); err != nil {
		return last, 0, fmt.Errorf("removing NIC rule %s: %w", m, err)
	}
	lat := time.Since(start)
	n.free = append(n.free, cur.Id)
	delete(n.ids, m)
	if m.IsFlow() {
		if err := n.bumpFlows(-1); err != nil {
			return last, lat, err
		}
	}
	var cs []nicTwCtr
	if err := n.objs.TwNicCtr.Lookup(cur.Id, &cs); err != nil {
		return last, lat, fmt.Errorf("reading removed rule's counters: %w", err)
	}
	for _, c := range cs {
		last.Packets += c.Packets
		last.Bytes += c.Bytes
	}
	return last, lat, nil
}

func (n *Stage) bumpFlows(d int) error {
	var cfg nicTwNicConfig
	if err := n.objs.TwNicCfg.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("reading NIC config: %w", err)
	}
	cfg.FlowsN = uint32(int(cfg.FlowsN) + d)
	if err := n.objs.TwNicCfg.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("writing NIC config: %w", err)
	}
	return nil
}

// Rules lists the table with summed per-CPU counters.
func (n *Stage) Rules() ([]tier.Entry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []tier.Entry
	var k nicTwNicKey
	var r nicTwNicRule
	it := n.objs.TwNicRules.Iterate()
	for it.Next(&k, &r) {
		var cs []nicTwCtr
		if err := n.objs.TwNicCtr.Lookup(r.Id, &cs); err != nil {
			return nil, fmt.Errorf("reading NIC counters: %w", err)
		}
		e := tier.Entry{Rule: tier.Rule{Match: nicMatch(k), Action: tier.Action(r.Action)}, HasCounters: true}
		for _, c := range cs {
			e.Counters.Packets += c.Packets
			e.Counters.Bytes += c.Bytes
		}
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading NIC rules: %w", err)
	}
	return out, nil
}

// Verdicts names the stage's verdict counters.
var Verdicts = []string{"hit_drop", "hit_forward", "miss", "unhandled", "tx_error", "to_nic_cpu", "nic_cpu_overload"}

// Mode is the NIC's approach (hybrid, nic-hw, nic, wire).
func (n *Stage) Mode() (Mode, error) {
	var cfg nicTwNicConfig
	if err := n.objs.TwNicCfg.Lookup(uint32(0), &cfg); err != nil {
		return "", fmt.Errorf("reading NIC config: %w", err)
	}
	return nicModeOf(cfg.Flags), nil
}

// Stats returns the stage's per-verdict counters, summed over CPUs.
func (n *Stage) Stats() (map[string]datapath.Counter, error) { return stageStats[datapath.Counter](n) }

// stageStats reads them as the data plane's counters (Stats) or the NIC
// tier's (Table.Verdicts).
func stageStats[O datapath.Counter | tier.Counters](n *Stage) (map[string]O, error) {
	return sumVerdicts[nicTwCtr, O](n.objs.TwNicStats, Verdicts, "NIC stats")
}

func netipFrom4(b [16]uint8) netip.Addr  { return netip.AddrFrom4([4]byte(b[:4])) }
func netipFrom16(b [16]uint8) netip.Addr { return netip.AddrFrom16(b) }

func isE2BIG(err error) bool { return errors.Is(err, unix.E2BIG) }

// Open gives access to the pinned state of an attached NIC stage
// without touching its program: for CLI verbs and the daemon.
func Open(wire, pinRoot string) (_ *Stage, err error) {
	root := pinRoot
	if root == "" {
		if root, err = bpffs.Root(); err != nil {
			return nil, err
		}
	}
	dir := bpffs.NICDir(root, wire)
	if !bpffs.Exists(dir) {
		return nil, fmt.Errorf("%w: no NIC stage on %s (run tierwall nic attach)", datapath.ErrNotAttached, wire)
	}
	n := &Stage{Iface: wire, Dir: dir}
	defer func() {
		if err != nil {
			n.objs.nicMaps.Close()
		}
	}()
	for name, dst := range map[string]**ebpf.Map{"tw_nic_rules": &n.objs.TwNicRules, "tw_nic_ctr": &n.objs.TwNicCtr,
		"tw_nic_stats": &n.objs.TwNicStats, "tw_nic_cfg": &n.objs.TwNicCfg, "tw_nic_cpu": &n.objs.TwNicCpu,
		"tw_nic_bucket": &n.objs.TwNicBucket} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("%w: loading pinned %s: %v", datapath.ErrIncompatible, name, err)
		}
		*dst = m
	}
	pol, err := loadPinnedPolicers(dir)
	if err != nil {
		return nil, err
	}
	for name, dst := range n.polMaps() {
		*dst = pol[name] // nil without: SetPolicers says so
	}
	var cfg nicTwNicConfig
	if err := n.objs.TwNicCfg.Lookup(uint32(0), &cfg); err != nil {
		return nil, fmt.Errorf("reading NIC config: %w", err)
	}
	n.cap, n.latency = int(cfg.Capacity), time.Duration(cfg.LatencyUs)*time.Microsecond
	if err := n.loadIDs(); err != nil {
		return nil, err
	}
	return n, nil
}

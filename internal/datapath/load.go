// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/enum"
)

// Mode is how the XDP program is attached.
type Mode uint32

const (
	// ModeNative runs XDP in the driver (the default, and the fast path).
	ModeNative Mode = 1
	// ModeGeneric runs XDP after skb allocation; works on any interface.
	ModeGeneric Mode = 2
	// ModeNIC runs the filter on the emulated NIC's CPU: the program is
	// tail-called by the NIC stage on the same interface, not linked.
	ModeNIC Mode = 3
)

var modeNames = enum.New("attach mode", ErrInvalid, map[Mode]string{
	ModeNative: "native", ModeGeneric: "generic", ModeNIC: "nic-cpu",
}).Empty(ModeNative)

func (m Mode) String() string { return modeNames.String(m) }

// ParseMode accepts "native" (or ""), "generic" or "nic-cpu" (the filter
// run by the emulated NIC stage instead of on a link).
func ParseMode(s string) (Mode, error) { return modeNames.Parse(s) }

// Defaults for Options fields left zero when creating new state.
const (
	DefaultExactCapacity   = 1 << 20
	DefaultPrefixCapacity  = 1 << 16
	DefaultAllowCapacity   = 1 << 12
	DefaultFeatureCapacity = 1 << 18
	// DefaultKnownGoodCapacity is per family (tw_good4, tw_good6).
	DefaultKnownGoodCapacity = 1 << 16
	// DefaultProvisionalCapacity is per family (tw_prov4, tw_prov6): the
	// sources the heavy-hitter detector may hold before the daemon
	// confirms or revokes them (within one interval).
	DefaultProvisionalCapacity = 1 << 14
	// protectCapacity bounds the protected lists the detector consults
	// (tw_protect4, tw_protect6): the daemon's protected and allowlisted
	// prefixes, and for IPv6 their covering detector prefixes.
	protectCapacity = 1 << 14
)

// Options size the maps when state is created. When pinned state is
// re-adopted, zero fields take the pinned values and non-zero fields must
// match them: capacities never change silently under a running filter.
type Options struct {
	Mode            Mode // zero: native, falling back to generic with a warning
	ExactCapacity4  int  // IPv4 /32 rules
	ExactCapacity6  int  // IPv6 /128 rules
	PrefixCapacity  int  // prefix rules, IPv4 and IPv6 together
	AllowCapacity   int  // allowlist prefixes, IPv4 and IPv6 together
	FeatureCapacity int  // (source, destination, protocol) keys per CPU per snapshot
	// KnownGoodCapacity bounds each known-good list (IPv4 and IPv6 apart);
	// beyond it the least recently seen entries are evicted.
	KnownGoodCapacity int
	// ProvisionalCapacity bounds each provisional table (IPv4 and IPv6
	// apart); a heavy hitter caught with the table full is counted, not
	// held.
	ProvisionalCapacity int
	// PinRoot overrides the bpffs mount (tests); empty means /sys/fs/bpf.
	PinRoot string
}

// sizes is what the maps and the program constants are derived from.
type sizes struct {
	exact4, exact6 uint32 // rule capacities
	slots4, slots6 uint32 // table slots: a power of two >= 1.5x capacity
	pfx, allow     uint32
	feat           uint32 // feature keys per CPU region
	featSlots      uint32 // slots per CPU region: a power of two >= 2x feat
	good           uint32 // known-good entries per family
	sieveBits      uint32 // the known-good sieve's bits (goodsieve.go)
	prov           uint32 // provisional entries per family
	ncpu           uint32
}

// featSlots keeps feature regions at most half full, so a probe run stays
// far below TW_FEAT_PROBE; memory is 2 buffers x ncpu x slots x 64 bytes.
func featSlots(capacity uint32) uint32 {
	n := 2 * uint64(capacity)
	if n < 64 {
		n = 64
	}
	return uint32(1) << bits.Len64(n-1)
}

// featEntries is the array size of one feature buffer: the CPU regions,
// then one header slot per CPU, then each CPU's port profile.
func (s sizes) featEntries() uint32 { return s.ncpu * (s.featSlots + 1 + portSlots) }

// portBase is where the port profiles start in a feature buffer.
func (s sizes) portBase() uint32 { return s.ncpu * (s.featSlots + 1) }

// tableSlots keeps the load factor at or below 2/3, where linear probing
// runs stay short enough that TW_MAX_PROBE is essentially never reached.
func tableSlots(capacity uint32) uint32 {
	n := uint64(capacity) + uint64(capacity)/2
	if n < 64 {
		n = 64
	}
	return uint32(1) << bits.Len64(n-1)
}

func (o Options) sizes(ncpu int) (sizes, error) {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	s := sizes{
		exact4: uint32(def(o.ExactCapacity4, DefaultExactCapacity)),
		exact6: uint32(def(o.ExactCapacity6, DefaultExactCapacity)),
		pfx:    uint32(def(o.PrefixCapacity, DefaultPrefixCapacity)),
		allow:  uint32(def(o.AllowCapacity, DefaultAllowCapacity)),
		feat:   uint32(def(o.FeatureCapacity, DefaultFeatureCapacity)),
		good:   uint32(def(o.KnownGoodCapacity, DefaultKnownGoodCapacity)),
		prov:   uint32(def(o.ProvisionalCapacity, DefaultProvisionalCapacity)),
		ncpu:   uint32(ncpu),
	}
	for name, v := range map[string]int{"exact IPv4 capacity": o.ExactCapacity4, "exact IPv6 capacity": o.ExactCapacity6,
		"prefix capacity": o.PrefixCapacity, "allow capacity": o.AllowCapacity, "feature capacity": o.FeatureCapacity,
		"known-good capacity": o.KnownGoodCapacity, "provisional capacity": o.ProvisionalCapacity} {
		if v < 0 || v > 1<<26 {
			return s, fmt.Errorf("%w: %s %d out of range 1..%d", ErrInvalid, name, v, 1<<26)
		}
	}
	s.slots4, s.slots6 = tableSlots(s.exact4), tableSlots(s.exact6)
	s.featSlots = featSlots(s.feat)
	s.sieveBits = sieveBits(s.good)
	if (uint64(s.featSlots)+1+portSlots)*uint64(s.ncpu) >= 1<<32 {
		return s, fmt.Errorf("%w: feature capacity %d too large for %d CPUs", ErrInvalid, s.feat, s.ncpu)
	}
	return s, nil
}

// apply sets map sizes and program constants in a fresh spec.
func (s sizes) apply(spec *ebpf.CollectionSpec) error {
	m := spec.Maps
	m["tw_ex4"].MaxEntries = s.slots4
	m["tw_ex6"].MaxEntries = s.slots6
	m["tw_ex_hot"].MaxEntries = hotSlots * s.ncpu
	m["tw_pfx4"].MaxEntries = s.pfx
	m["tw_pfx6"].MaxEntries = s.pfx
	m["tw_pfx_ctr"].MaxEntries = s.pfx * s.ncpu
	m["tw_allow4"].MaxEntries = s.allow
	m["tw_allow6"].MaxEntries = s.allow
	m["tw_allow_ctr"].MaxEntries = s.allow * s.ncpu
	m["tw_feat_a"].MaxEntries = s.featEntries()
	m["tw_feat_b"].MaxEntries = s.featEntries()
	m["tw_feat"].InnerMap.MaxEntries = s.featEntries()
	m["tw_frule_ctr"].MaxEntries = uint32(frulesIDs) * s.ncpu
	m["tw_frule_tb"].MaxEntries = uint32(frulesIDs) * s.ncpu
	m["tw_good4"].MaxEntries = s.good
	m["tw_good6"].MaxEntries = s.good
	m["tw_good_sieve"].MaxEntries = s.sieveBits / 64
	m["tw_prov4"].MaxEntries = s.prov
	m["tw_hh_sketch"].MaxEntries = uint32(filterTwHhLimitTW_HH_LINES) * s.ncpu
	m["tw_prov6"].MaxEntries = s.prov
	m["tw_protect4"].MaxEntries = protectCapacity
	m["tw_protect6"].MaxEntries = protectCapacity
	for name, v := range map[string]uint32{"tw_ex4_slots": s.slots4, "tw_ex6_slots": s.slots6,
		"tw_pfx_cap": s.pfx, "tw_allow_cap": s.allow, "tw_nr_cpus": s.ncpu,
		"tw_feat_slots": s.featSlots, "tw_feat_cap": s.feat, "tw_good_sieve_bits": s.sieveBits} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return nil
}

// pinnedNames are the maps that hold state; .rodata belongs to one load of
// the program and is rebuilt from the sizes each time.
func pinnedNames(spec *ebpf.CollectionSpec) []string {
	var names []string
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") && !unpinned[name] {
			names = append(names, name)
		}
	}
	return names
}

// Datapath is the filter on one interface: its pinned maps and, when this
// process attached it, the program and link.
type Datapath struct {
	Iface string
	Dir   string
	// Warnings says what was done differently from what was asked, e.g. a
	// fallback to generic mode.
	Warnings []string

	maps  filterMaps
	prog  *ebpf.Program
	sizes sizes
	ex4   *exactTable
	ex6   *exactTable
	// feature buffers mapped into this process, by map, kept across
	// snapshots so their pages are faulted in once
	featMem map[*ebpf.Map][]filterTwFeatSlot
	// the drain's working memory, reused by every snapshot (snapshot.go)
	drained drainBufs
	// the heavy-hitter report reader, opened on first use (heavy.go)
	heavyEvents *HeavyEvents
	// the known-good sieve mapped into this process (goodsieve.go)
	sieve    []uint64
	sieveRaw []byte
}

// Close releases this process's handles. Pinned state, and so the filter,
// stays in place.
func (d *Datapath) Close() error {
	if d.heavyEvents != nil {
		d.heavyEvents.Close()
	}
	if d.prog != nil {
		d.prog.Close()
	}
	d.unmapFeatures()
	d.unmapSieve()
	d.ex4.unmap()
	d.ex6.unmap()
	return d.maps.Close()
}

func stateDir(ifname, root string) (string, error) {
	if root == "" {
		var err error
		if root, err = bpffs.Root(); err != nil {
			return "", err
		}
	}
	return bpffs.FilterDir(root, ifname), nil
}

// Attach loads the filter onto ifname. Existing pinned state for the
// interface is re-adopted with its rules and counters; otherwise new maps
// are created and published under the pin directory in one rename.
func Attach(ifname string, o Options) (*Datapath, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNoInterface, ifname)
	}
	if o.Mode != 0 && o.Mode != ModeNative && o.Mode != ModeGeneric && o.Mode != ModeNIC {
		return nil, fmt.Errorf("%w: attach mode %d", ErrInvalid, o.Mode)
	}
	dir, err := stateDir(ifname, o.PinRoot)
	if err != nil {
		return nil, err
	}
	lk, err := bpffs.Lock(dir)
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()

	if bpffs.Exists(dir) {
		return adopt(ifc, dir, o)
	}
	return create(ifc, dir, o)
}

// load creates fresh maps and the program bound to them, with the config
// initialised, without attaching or pinning anything.
func load(o Options) (_ *Datapath, _ *ebpf.CollectionSpec, err error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, nil, fmt.Errorf("counting CPUs: %w", err)
	}
	sz, err := o.sizes(ncpu)
	if err != nil {
		return nil, nil, err
	}
	spec, err := loadFilter()
	if err != nil {
		return nil, nil, fmt.Errorf("loading filter spec: %w", err)
	}
	if err := sz.apply(spec); err != nil {
		return nil, nil, err
	}
	d := &Datapath{sizes: sz}
	var objs filterObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, nil, fmt.Errorf("loading filter: %w", err)
	}
	d.maps, d.prog = objs.filterMaps, objs.TwFilter
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	var seed [4 + 4*len(featSeed{})]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, nil, fmt.Errorf("seeding hashes: %w", err)
	}
	cfg := filterTwConfig{
		Layout:    layoutVersion,
		Seed:      binary.NativeEndian.Uint32(seed[:]),
		Features:  1,
		XdpMode:   uint32(o.Mode),
		Exact4Cap: sz.exact4,
		Exact6Cap: sz.exact6,
		FeatCap:   sz.feat,
		FeatSince: monoNow(),
		GoodPps:   DefaultKnownGoodPPS,
	}
	for i := range cfg.FeatSeed {
		cfg.FeatSeed[i] = binary.NativeEndian.Uint32(seed[4+4*i:])
	}
	if err := d.maps.TwCfg.Put(uint32(0), &cfg); err != nil {
		return nil, nil, fmt.Errorf("writing config: %w", err)
	}
	if err := d.maps.TwFeat.Put(uint32(0), d.maps.TwFeatA); err != nil {
		return nil, nil, fmt.Errorf("activating feature buffer: %w", err)
	}
	if err := d.maps.TwFrules.Put(uint32(0), d.maps.TwFrulesA); err != nil {
		return nil, nil, fmt.Errorf("activating flow-rule bank: %w", err)
	}
	d.initTables(cfg.Seed)
	return d, spec, nil
}

// LoadDetached loads the filter with fresh maps and attaches it nowhere:
// for BPF_PROG_TEST_RUN tests and benchmarks. Close releases everything.
func LoadDetached(o Options) (*Datapath, error) {
	d, _, err := load(o)
	return d, err
}

// Program is the loaded filter program (nil for a Datapath from Open).
func (d *Datapath) Program() *ebpf.Program { return d.prog }

func create(ifc *net.Interface, dir string, o Options) (_ *Datapath, err error) {
	d, spec, err := load(o)
	if err != nil {
		return nil, err
	}
	d.Iface, d.Dir = ifc.Name, dir
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	// Pin into a private directory, attach, then publish with one rename:
	// a crash at any step leaves either nothing or a complete state.
	// "tmp:" cannot be an interface's directory: ':' is not allowed there.
	tmp := filepath.Join(filepath.Dir(dir), fmt.Sprintf("tmp:%s:%d", bpffs.PinName(ifc.Name), os.Getpid()))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", tmp, err)
	}
	defer os.RemoveAll(tmp)
	all := d.mapsByName()
	for _, name := range pinnedNames(spec) {
		if all[name] == nil {
			return nil, fmt.Errorf("pinning %s: the generated bindings lack it (run go generate)", name)
		}
		if err := all[name].Pin(filepath.Join(tmp, name)); err != nil {
			return nil, fmt.Errorf("pinning %s: %w", name, err)
		}
	}
	if o.Mode == ModeNIC {
		if err := d.updateConfig(func(c *filterTwConfig) { c.XdpMode = uint32(ModeNIC) }); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, dir); err != nil {
			return nil, fmt.Errorf("publishing %s: %w", dir, err)
		}
		if err := chainFilter(bpffs.NICDirFor(dir), d.prog); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return d, nil
	}
	lnk, mode, warn, err := attachXDP(d.prog, ifc, o.Mode)
	if err != nil {
		return nil, err
	}
	defer lnk.Close()
	d.Warnings = append(d.Warnings, warn...)
	if err := d.updateConfig(func(c *filterTwConfig) { c.XdpMode = uint32(mode) }); err != nil {
		return nil, err
	}
	if err := lnk.Pin(filepath.Join(tmp, bpffs.LinkPin)); err != nil {
		return nil, fmt.Errorf("pinning link: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("publishing %s: %w", dir, err)
	}
	return d, nil
}

func attachXDP(prog *ebpf.Program, ifc *net.Interface, want Mode) (link.Link, Mode, []string, error) {
	mode := want
	if mode == 0 {
		mode = ModeNative
	}
	flags := link.XDPDriverMode
	if mode == ModeGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: flags})
	if err == nil {
		return l, mode, nil, nil
	}
	if want == 0 && mode == ModeNative {
		l, gerr := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPGenericMode})
		if gerr == nil {
			return l, ModeGeneric, []string{fmt.Sprintf("native XDP unavailable on %s (%v); attached in generic mode, which is much slower", ifc.Name, err)}, nil
		}
	}
	return nil, 0, nil, fmt.Errorf("attaching XDP in %s mode to %s: %w", mode, ifc.Name, err)
}

// openPinned loads every pinned map of dir and the sizes they were made
// with, after checking the layout version.
func openPinned(dir string) (map[string]*ebpf.Map, filterTwConfig, error) {
	var cfg filterTwConfig
	spec, err := loadFilter()
	if err != nil {
		return nil, cfg, fmt.Errorf("loading filter spec: %w", err)
	}
	pinned := map[string]*ebpf.Map{}
	closeAll := func() {
		for _, m := range pinned {
			m.Close()
		}
	}
	for _, name := range pinnedNames(spec) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			closeAll()
			if errors.Is(err, os.ErrNotExist) {
				return nil, cfg, fmt.Errorf("%w: %s has no map %s (remove it with detach)", ErrIncompatible, dir, name)
			}
			return nil, cfg, fmt.Errorf("opening pinned %s: %w", name, err)
		}
		pinned[name] = m
	}
	if err := pinned["tw_cfg"].Lookup(uint32(0), &cfg); err != nil {
		closeAll()
		return nil, cfg, fmt.Errorf("reading pinned config: %w", err)
	}
	if cfg.Layout != layoutVersion {
		closeAll()
		return nil, cfg, fmt.Errorf("%w: layout %d, this tierwall uses %d (detach to recreate)", ErrIncompatible, cfg.Layout, layoutVersion)
	}
	return pinned, cfg, nil
}

// pinnedSizes recovers the sizes pinned state was created with.
func pinnedSizes(pinned map[string]*ebpf.Map, cfg filterTwConfig) sizes {
	ncpu := pinned["tw_pfx_ctr"].MaxEntries() / pinned["tw_pfx4"].MaxEntries()
	return sizes{
		exact4: cfg.Exact4Cap, exact6: cfg.Exact6Cap,
		slots4: pinned["tw_ex4"].MaxEntries(), slots6: pinned["tw_ex6"].MaxEntries(),
		pfx: pinned["tw_pfx4"].MaxEntries(), allow: pinned["tw_allow4"].MaxEntries(),
		feat:      cfg.FeatCap,
		good:      pinned["tw_good4"].MaxEntries(),
		sieveBits: pinned["tw_good_sieve"].MaxEntries() * 64,
		prov:      pinned["tw_prov4"].MaxEntries(),
		ncpu:      ncpu,
		// featEntries = ncpu * (featSlots + 1 + portSlots)
		featSlots: pinned["tw_feat_a"].MaxEntries()/ncpu - 1 - portSlots,
	}
}

func (o Options) matches(s sizes) error {
	var diffs []string
	check := func(name string, asked int, have uint32) {
		if asked != 0 && uint32(asked) != have {
			diffs = append(diffs, fmt.Sprintf("%s %d (pinned %d)", name, asked, have))
		}
	}
	check("exact IPv4 capacity", o.ExactCapacity4, s.exact4)
	check("exact IPv6 capacity", o.ExactCapacity6, s.exact6)
	check("prefix capacity", o.PrefixCapacity, s.pfx)
	check("allow capacity", o.AllowCapacity, s.allow)
	check("feature capacity", o.FeatureCapacity, s.feat)
	check("known-good capacity", o.KnownGoodCapacity, s.good)
	check("provisional capacity", o.ProvisionalCapacity, s.prov)
	if len(diffs) > 0 {
		return fmt.Errorf("%w: asked for %s; detach first to resize", ErrIncompatible, strings.Join(diffs, ", "))
	}
	return nil
}

// loadPinned builds a Datapath over pinned maps; withProg also loads a
// new copy of the program bound to them.
func loadPinned(ifname, dir string, withProg bool) (_ *Datapath, err error) {
	pinned, cfg, err := openPinned(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, m := range pinned {
			m.Close() // LoadAndAssign took its own references
		}
	}()
	sz := pinnedSizes(pinned, cfg)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("counting CPUs: %w", err)
	}
	if sz.ncpu != uint32(ncpu) {
		return nil, fmt.Errorf("%w: pinned for %d CPUs, machine has %d (detach to recreate)", ErrIncompatible, sz.ncpu, ncpu)
	}
	spec, err := loadFilter()
	if err != nil {
		return nil, fmt.Errorf("loading filter spec: %w", err)
	}
	if err := sz.apply(spec); err != nil {
		return nil, err
	}
	d := &Datapath{Iface: ifname, Dir: dir, sizes: sz}
	opts := &ebpf.CollectionOptions{MapReplacements: pinned}
	if withProg {
		var objs filterObjects
		if err := spec.LoadAndAssign(&objs, opts); err != nil {
			return nil, fmt.Errorf("%w: loading filter over pinned maps: %w", ErrIncompatible, err)
		}
		d.maps, d.prog = objs.filterMaps, objs.TwFilter
	} else if err := spec.LoadAndAssign(&d.maps, opts); err != nil {
		return nil, fmt.Errorf("%w: opening pinned maps: %w", ErrIncompatible, err)
	}
	d.initTables(cfg.Seed)
	return d, nil
}

func adopt(ifc *net.Interface, dir string, o Options) (_ *Datapath, err error) {
	d, err := loadPinned(ifc.Name, dir, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := o.matches(d.sizes); err != nil {
		return nil, err
	}
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	if o.Mode != 0 && uint32(o.Mode) != cfg.XdpMode {
		return nil, fmt.Errorf("%w: attached in %s mode, asked for %s; detach first", ErrIncompatible, Mode(cfg.XdpMode), o.Mode)
	}

	if Mode(cfg.XdpMode) == ModeNIC {
		// The prog-array slot swaps atomically too.
		return d, chainFilter(bpffs.NICDirFor(dir), d.prog)
	}
	// The pinned link keeps the old program running until Update swaps in
	// the new one atomically: no packet goes unfiltered during an upgrade.
	lp := filepath.Join(dir, bpffs.LinkPin)
	switch updated, defunct, err := bpffs.UpdatePinnedLink(lp, d.prog, ifc.Index); {
	case err != nil:
		return nil, err
	case updated:
		return d, nil
	case defunct:
		d.Warnings = append(d.Warnings, fmt.Sprintf("pinned link of %s was defunct (interface recreated); attached anew", ifc.Name))
	}
	lnk, mode, warn, err := attachXDP(d.prog, ifc, Mode(cfg.XdpMode))
	if err != nil {
		return nil, err
	}
	defer lnk.Close()
	d.Warnings = append(d.Warnings, warn...)
	if err := lnk.Pin(lp); err != nil {
		return nil, fmt.Errorf("pinning link: %w", err)
	}
	if err := d.updateConfig(func(c *filterTwConfig) { c.XdpMode = uint32(mode) }); err != nil {
		return nil, err
	}
	return d, nil
}

// Open gives access to the pinned state of an attached interface without
// touching the program: what every CLI verb but attach and detach uses.
func Open(ifname, pinRoot string) (*Datapath, error) {
	dir, err := stateDir(ifname, pinRoot)
	if err != nil {
		return nil, err
	}
	if !bpffs.Exists(dir) {
		return nil, fmt.Errorf("%w: %s (run tierwall attach %s)", ErrNotAttached, ifname, ifname)
	}
	return loadPinned(ifname, dir, false)
}

// Detach removes the filter from ifname and deletes its pinned state,
// rules and counters included.
func Detach(ifname, pinRoot string) error {
	dir, err := stateDir(ifname, pinRoot)
	if err != nil {
		return err
	}
	if err := detach(ifname, dir); err != nil {
		return err
	}
	// Every detach path (CLI, lab, tests) leaves nothing behind: the lock
	// file and an emptied namespace directory go too.
	if err := bpffs.Forget(dir); err != nil {
		return fmt.Errorf("cleaning up after %s: %w", ifname, err)
	}
	return nil
}

func detach(ifname, dir string) error {
	lk, err := bpffs.Lock(dir)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if !bpffs.Exists(dir) {
		return fmt.Errorf("%w: %s", ErrNotAttached, ifname)
	}
	var cfg filterTwConfig
	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "tw_cfg"), nil); err == nil {
		_ = m.Lookup(uint32(0), &cfg)
		m.Close()
	}
	if Mode(cfg.XdpMode) == ModeNIC {
		if err := chainFilter(bpffs.NICDirFor(dir), nil); err != nil && !errors.Is(err, ErrNotAttached) {
			return err
		}
	}
	if l, err := link.LoadPinnedLink(filepath.Join(dir, bpffs.LinkPin), nil); err == nil {
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("unpinning link: %w", err)
		}
		l.Close() // last reference: the program leaves the interface here
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// Attached lists the interfaces with pinned state in this network namespace.
func Attached(pinRoot string) ([]string, error) {
	dir, err := stateDir("", pinRoot)
	if err != nil {
		return nil, err
	}
	dir = strings.TrimSuffix(dir, "/")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), "tmp:") && !strings.HasPrefix(e.Name(), "ns:") {
			out = append(out, bpffs.IfaceFromPin(e.Name()))
		}
	}
	return out, nil
}

// mapsByName lists the filter's maps by their C names, read from the
// generated struct's ebpf tags: a map added to the C side is pinned (and
// re-adopted) without anyone remembering to list it here — the heavy
// hitter's maps were once forgotten in a hand-written list, and create
// pinned a nil map.
func (d *Datapath) mapsByName() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&d.maps).Elem()
	for i := range v.NumField() {
		if name := v.Type().Field(i).Tag.Get("ebpf"); name != "" {
			out[name], _ = v.Field(i).Interface().(*ebpf.Map)
		}
	}
	return out
}

func (d *Datapath) config() (filterTwConfig, error) {
	var c filterTwConfig
	if err := d.maps.TwCfg.Lookup(uint32(0), &c); err != nil {
		return c, fmt.Errorf("reading config: %w", err)
	}
	return c, nil
}

// updateConfig is a read-modify-write of the single config entry; callers
// hold the interface lock.
func (d *Datapath) updateConfig(f func(*filterTwConfig)) error {
	c, err := d.config()
	if err != nil {
		return err
	}
	f(&c)
	if err := d.maps.TwCfg.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	return nil
}

// lock takes the interface's lock for a state change.
func (d *Datapath) lock() (*bpffs.FileLock, error) { return bpffs.Lock(d.Dir) }

// MappedBytes is the data plane's memory a daemon with these options maps
// to read it in place (the two feature buffers, the exact tables and
// their hot entries, the known-good sieve), at the most: what a memory budget for the daemon
// must leave room for besides its heap. It is fixed by the capacities and
// the number of CPUs, whatever the traffic.
func (o Options) MappedBytes() (uint64, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, fmt.Errorf("counting CPUs: %w", err)
	}
	s, err := o.sizes(ncpu)
	if err != nil {
		return 0, err
	}
	n := 2 * uint64(s.featEntries()) * uint64(unsafe.Sizeof(filterTwFeatSlot{}))
	n += uint64(s.slots4) * uint64(unsafe.Sizeof(filterTwExact4{}))
	n += uint64(s.slots6) * uint64(unsafe.Sizeof(filterTwExact6{}))
	n += 2 * uint64(hotSlots) * uint64(s.ncpu) * uint64(unsafe.Sizeof(filterTwHot{}))
	n += uint64(s.sieveBits) / 8
	return n, nil
}

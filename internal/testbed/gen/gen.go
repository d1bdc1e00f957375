// SPDX-License-Identifier: Apache-2.0

// Package gen is the live-frames traffic generator (bpf/testbed/xdp_gen.c):
// BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES transmits a template
// frame through a veth, rewriting the source per frame from a sample table
// or a spoofed prefix, at NIC-like cost (../shared/MEASURING.md).
package gen

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
	"golang.org/x/sys/unix"
)

// The traffic generator's kernel side (bpf/testbed/xdp_gen.c): BPF_PROG_TEST_RUN
// in live-frames mode transmits each repetition's frame out of an
// interface as an xdp_frame, after the program rewrote its source.

// bpfTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h).
const bpfTestXDPLiveFrames = 1 << 1

// GenSpec describes what a Generator sends.
type GenSpec struct {
	Iface    string // transmit out of this interface (calling thread's netns)
	Template []byte // a complete frame whose source address is all zeros
	// Samples are the sources, used in order and wrapping around (their
	// count must be a power of two); or, when Spoof is valid, every frame
	// gets a random source inside Spoof.
	Samples []netip.Addr
	Spoof   netip.Prefix
	// Card, if set, is the emulated NIC's match table: the generator then
	// runs it on every frame it builds and drops what the card drops, at
	// the end of the wire, before any interface sees it (bpf/testbed/xdp_gen.c
	// says why).
	Card *nicstage.MatchTable
}

// cardMaps are the maps of the NIC's table the program uses.
var cardMaps = []string{"tw_nic_rules", "tw_nic_ctr", "tw_nic_stats", "tw_nic_cfg"}

// Generator sends frames at the kernel's live-frames rate.
type Generator struct {
	objs    trafgenObjects
	ifindex int
	ncpu    int
	samples int
	// perRun holds the frames one repetition of the test run put on the
	// wire in each of the last runs (more than 1 when the card drops
	// some: it builds the next frame in the same page); Send sizes its
	// runs by the most or the fewest.
	perRun  [perRunHistory]float64
	perRunN int
}

// perRunHistory is how many runs' frames per repetition Send remembers.
// The card's hits are not spread evenly over the walk: on the lab at 128K
// uniform sources one run of 100,000 frames saw 0 card drops and another
// 1,100, where a binomial margin of four standard deviations is ±80 (most
// likely because placement chose the rules by counts that the walk's
// position in the sample table had skewed, so they sit close together).
// Sized by the last run alone, one run in two came up short.
const perRunHistory = 16

// NewGenerator loads the generator for spec.
func NewGenerator(spec GenSpec) (*Generator, error) {
	ifc, err := net.InterfaceByName(spec.Iface)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, spec.Iface)
	}
	cfg, err := genConfig(spec.Template)
	if err != nil {
		return nil, err
	}
	n := len(spec.Samples)
	if spec.Spoof.IsValid() {
		cfg.Mode = trafgenTwGenModeTW_GEN_SPOOF
		cfg.SpoofLen = uint32(spec.Spoof.Bits())
		cfg.SpoofBase = spec.Spoof.Addr().As16()
		if spec.Spoof.Addr().Is4() {
			var b [16]byte
			a := spec.Spoof.Addr().As4()
			copy(b[:], a[:])
			cfg.SpoofBase = b
		}
		if (spec.Spoof.Addr().Is4()) != (cfg.Family == 4) {
			return nil, fmt.Errorf("%w: spoof prefix %s and template family differ", datapath.ErrInvalid, spec.Spoof)
		}
		n = 1
	} else if n == 0 || n&(n-1) != 0 {
		return nil, fmt.Errorf("%w: %d samples (want a power of two)", datapath.ErrInvalid, n)
	}
	gspec, err := loadTrafgen()
	if err != nil {
		return nil, err
	}
	gspec.Maps["tw_gen_samples"].MaxEntries = uint32(n)
	if err := gspec.Variables["tw_gen_mask"].Set(uint32(n - 1)); err != nil {
		return nil, err
	}
	var opts *ebpf.CollectionOptions
	if spec.Card != nil {
		opts = &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
		for _, name := range cardMaps {
			m := spec.Card.Maps()[name]
			if m == nil {
				return nil, fmt.Errorf("%w: card map %s missing", datapath.ErrInvalid, name)
			}
			// The table's capacity is the card's, not the object's default.
			gspec.Maps[name].MaxEntries = m.MaxEntries()
			opts.MapReplacements[name] = m
		}
		if err := gspec.Variables["tw_gen_card"].Set(uint32(1)); err != nil {
			return nil, err
		}
	}
	g := &Generator{ifindex: ifc.Index, samples: n}
	if g.ncpu, err = ebpf.PossibleCPU(); err != nil {
		return nil, err
	}
	if err := gspec.LoadAndAssign(&g.objs, opts); err != nil {
		return nil, fmt.Errorf("loading generator: %w", err)
	}
	if err := g.objs.TwGenCfg.Put(uint32(0), cfg); err != nil {
		g.Close()
		return nil, err
	}
	if !spec.Spoof.IsValid() {
		if err := g.SetSamples(spec.Samples); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// genConfig reads the family, checksum offsets and base checksums from a
// template frame (no VLAN tags, no IPv4 options or IPv6 extensions).
func genConfig(t []byte) (*trafgenTwGenConfig, error) {
	if len(t) < 14+20 {
		return nil, fmt.Errorf("%w: template of %d bytes", datapath.ErrInvalid, len(t))
	}
	c := &trafgenTwGenConfig{}
	var proto uint8
	var l4 int
	switch binary.BigEndian.Uint16(t[12:]) {
	case 0x0800:
		if t[14]&0x0f != 5 {
			return nil, fmt.Errorf("%w: template with IPv4 options", datapath.ErrInvalid)
		}
		if binary.BigEndian.Uint32(t[14+12:]) != 0 {
			return nil, fmt.Errorf("%w: template source must be 0.0.0.0", datapath.ErrInvalid)
		}
		c.Family, proto, l4 = 4, t[14+9], 14+20
		c.IpCsum = uint32(binary.BigEndian.Uint16(t[14+10:]))
	case 0x86dd:
		if len(t) < 14+40 {
			return nil, fmt.Errorf("%w: short IPv6 template", datapath.ErrInvalid)
		}
		if !netip.AddrFrom16([16]byte(t[14+8 : 14+24])).IsUnspecified() {
			return nil, fmt.Errorf("%w: template source must be unspecified (::)", datapath.ErrInvalid)
		}
		c.Family, proto, l4 = 6, t[14+6], 14+40
	default:
		return nil, fmt.Errorf("%w: template is not IPv4 or IPv6", datapath.ErrInvalid)
	}
	switch proto {
	case 17:
		c.L4CsumOff, c.Udp = uint32(l4+6), 1
	case 6:
		c.L4CsumOff = uint32(l4 + 16)
	default:
		return nil, fmt.Errorf("%w: template protocol %d (want UDP or TCP)", datapath.ErrInvalid, proto)
	}
	if int(c.L4CsumOff)+2 > len(t) {
		return nil, fmt.Errorf("%w: template truncated before its L4 checksum", datapath.ErrInvalid)
	}
	// The card's key: ports as the frame holds them (network order in
	// memory), the destination in the key's leading bytes.
	k := &c.CardKey
	k.Family, k.Proto = uint8(c.Family), proto
	k.Sport, k.Dport = binary.LittleEndian.Uint16(t[l4:]), binary.LittleEndian.Uint16(t[l4+2:])
	if c.Family == 4 {
		copy(k.Dst[:], t[14+16:14+20])
		c.CardL3len = uint32(binary.BigEndian.Uint16(t[14+2:]))
	} else {
		copy(k.Dst[:], t[14+24:14+40])
		c.CardL3len = 40 + uint32(binary.BigEndian.Uint16(t[14+4:]))
	}
	c.L4Csum = uint32(binary.BigEndian.Uint16(t[c.L4CsumOff:]))
	c.HdrLen = uint32(copy(c.Hdr[:], t))
	if c.Udp == 1 && c.L4Csum == 0xffff {
		c.L4Csum = 0 // a computed 0 is sent as 0xffff; the base is the sum
	}
	return c, nil
}

// SetSamples replaces the source sequence (same count as at creation):
// how rankings change over time. Sources must match the template family.
func (g *Generator) SetSamples(srcs []netip.Addr) error {
	if len(srcs) != g.samples {
		return fmt.Errorf("%w: %d samples, generator has %d", datapath.ErrInvalid, len(srcs), g.samples)
	}
	keys := make([]uint32, len(srcs))
	vals := make([]trafgenTwGenAddr, len(srcs))
	for i, a := range srcs {
		keys[i] = uint32(i)
		if a.Is4() {
			b := a.As4()
			copy(vals[i].A[:], b[:])
		} else {
			vals[i].A = a.As16()
		}
	}
	if _, err := g.objs.TwGenSamples.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("writing samples: %w", err)
	}
	return nil
}

// xdpMDLive is struct xdp_md with the interface to transmit on.
type xdpMDLive struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Send transmits frame up to n times (in one test run) and returns how
// many frames the program put on the wire: handed to the kernel for
// transmission, or dropped by the card's table (GenSpec.Card). Which
// sample each frame came from is not counted here: Cursor and AddWalked
// say it for a whole stretch of sends, so a sender whose CPU is shared
// with the receiver (the lab's wire) does no per-source work per call.
//
// Without the card every repetition of the run puts out one frame and
// Send puts out n. With it a repetition puts out one frame for the host
// plus the card's drops before it, so the frames a run of r repetitions
// puts out are known only afterwards. Every CPU stops at n frames; each
// repetition left after that is an XDP_DROP, and on the lab those cost
// the generator's CPU far more than their share (at 128K sources, runs
// sized to leave 0.6% of repetitions over sent 8-14% fewer frames than
// host-only's, whose runs leave none). So without exact the run is sized
// by the most frames a repetition put out in the recent runs, less four
// standard deviations, and usually puts out a little fewer than n: the
// caller's next call sends the rest. With exact (a capped flood's last
// call, where a further call would cost an RCU grace period, ~15 ms
// here, after its deadline) it is sized by the fewest, plus four.
func (g *Generator) Send(frame []byte, n uint32, exact bool) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	before, err := g.state()
	if err != nil {
		return 0, err
	}
	st := make([]trafgenTwGenState, len(before))
	for cpu := range before {
		st[cpu] = before[cpu]
		st[cpu].Stop = before[cpu].Sent + uint64(n)
	}
	if err := g.objs.TwGenSt.Put(uint32(0), st); err != nil {
		return 0, fmt.Errorf("writing generator state: %w", err)
	}
	reps := n
	if low, high := g.perRunRange(); high > 1 {
		// A repetition puts out 1 + a geometric number of card drops
		// (share p = 1 - 1/r), so n frames need n/r ± sqrt(n·p/r)
		// repetitions.
		fn := float64(n)
		sd := func(r float64) float64 { return math.Sqrt(fn * (1 - 1/r) / r) }
		if exact {
			reps = uint32(min(fn, fn/low+4*sd(low)+64))
		} else {
			reps = uint32(max(1, fn/high-4*sd(high)))
		}
	}
	err = onOneCPU(func() error {
		_, err := g.objs.TwGen.Run(&ebpf.RunOptions{
			Data:    frame,
			Repeat:  reps,
			Flags:   bpfTestXDPLiveFrames,
			Context: &xdpMDLive{Data: 0, DataEnd: uint32(len(frame)), IngressIfindex: uint32(g.ifindex)},
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("live-frames run: %w", err)
	}
	after, err := g.state()
	if err != nil {
		return 0, err
	}
	var sent, runs uint64
	for cpu := range after {
		sent += after[cpu].Sent - before[cpu].Sent
		runs += after[cpu].Runs - before[cpu].Runs
	}
	if runs > 0 {
		g.perRun[g.perRunN%perRunHistory] = float64(sent) / float64(runs)
		g.perRunN++
	}
	return sent, nil
}

// perRunRange is the fewest and the most frames per repetition of the
// recent runs; 1 and 1 before the first.
func (g *Generator) perRunRange() (low, high float64) {
	if g.perRunN == 0 {
		return 1, 1
	}
	low, high = math.Inf(1), 0
	for _, r := range g.perRun[:min(g.perRunN, perRunHistory)] {
		low, high = min(low, r), max(high, r)
	}
	return low, high
}

// Totals are the generator's counts so far, over every CPU.
type Totals struct {
	// CardDropped of the frames sent the card's table dropped
	// (GenSpec.Card); Send counts them as sent, since they reached the
	// end of the wire.
	CardDropped uint64
	// Spare repetitions found their run's frames all out: each was an
	// XDP_DROP, which on the lab costs the sending CPU (Send).
	Spare uint64
}

// Totals reads the counts so far.
func (g *Generator) Totals() (Totals, error) {
	st, err := g.state()
	if err != nil {
		return Totals{}, err
	}
	var t Totals
	for cpu := range st {
		t.CardDropped += st[cpu].CardDrop
		t.Spare += st[cpu].Spare
	}
	return t, nil
}

// Cursor is where each CPU's walk over the samples stands.
type Cursor []uint64

// Cursor reads the walk's position on every CPU.
func (g *Generator) Cursor() (Cursor, error) {
	st, err := g.state()
	if err != nil {
		return nil, err
	}
	c := make(Cursor, len(st))
	for cpu := range st {
		c[cpu] = st[cpu].Seq
	}
	return c, nil
}

// AddWalked adds to per[i] the frames sample index i was the source of
// between the cursors from and to (per has one slot per sample).
func (g *Generator) AddWalked(per []uint64, from, to Cursor) error {
	if len(per) != g.samples || len(from) != len(to) {
		return fmt.Errorf("%w: %d counts for %d samples, cursors of %d and %d CPUs", datapath.ErrInvalid, len(per), g.samples, len(from), len(to))
	}
	for cpu := range to {
		// This CPU walked samples [seq0, seq1): full cycles plus a window.
		s0, k := from[cpu], to[cpu]-from[cpu]
		full, rest := k/uint64(g.samples), k%uint64(g.samples)
		if full > 0 {
			for i := range per {
				per[i] += full
			}
		}
		for i := uint64(0); i < rest; i++ {
			per[(s0+i)%uint64(g.samples)]++
		}
	}
	return nil
}

func (g *Generator) state() ([]trafgenTwGenState, error) {
	var st []trafgenTwGenState
	if err := g.objs.TwGenSt.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("reading generator state: %w", err)
	}
	return st, nil
}

// Close releases the generator.
func (g *Generator) Close() error { return g.objs.Close() }

// onOneCPU runs f with the calling thread pinned to the CPU it is on.
// The generator's stop is per CPU (a shared counter would cost every
// frame an atomic): a live-frames run may yield between batches and, on
// a busy machine, resume on another CPU, whose own stop would let it
// send up to n more (a capped flood of 200,000 frames sent 200,672 while
// CI ran VMs beside it). Pinned, the kernel time-slices the run instead.
func onOneCPU(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return fmt.Errorf("reading the thread's CPU affinity: %w", err)
	}
	var cpu uint32
	if _, _, errno := unix.Syscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return fmt.Errorf("getcpu: %w", errno)
	}
	var one unix.CPUSet
	one.Set(int(cpu))
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("pinning the generator to CPU %d: %w", cpu, err)
	}
	err := f()
	if rerr := unix.SchedSetaffinity(0, &was); rerr != nil && err == nil {
		err = fmt.Errorf("restoring the thread's CPU affinity: %w", rerr)
	}
	return err
}

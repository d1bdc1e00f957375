// SPDX-License-Identifier: Apache-2.0

// Package xdp is the flow probe's software tier (bpf/probe/xdp_probe.c): a flow
// table in XDP on the host port, per-direction counters and the NIC's marks
// per flow, and the first packets of each new flow handed to user space for
// DPI through a ring buffer. It implements flow.SoftwareTier for the probe
// engine (internal/probe/flowprobe). Passive, the program consumes the mirrored
// traffic it accounts; inline, it forwards to an egress port, dropping the
// flows user space marked for discard.
//
// State and action are changed in place by a second BPF program,
// tw_probe_set_state, run through BPF_PROG_TEST_RUN: a map update of the
// whole entry would lose the counter increments XDP makes between the
// read and the write, and a separate control map would cost every packet a
// second lookup.
package xdp

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// Defaults for Config fields left zero, and the limits of the program
// (TW_DPI_PKTS_MAX, TW_DPI_SNAP_MAX).
const (
	DefaultCapacity   = 1 << 20
	DefaultDPIPackets = 10
	DefaultSnapLen    = 512
	DefaultRingBytes  = 8 << 20
	MaxDPIPackets     = 32
	MaxSnapLen        = len(probeTwDpiSample{}.Data)
	MaxCapacity       = 1 << 26
)

// ErrNoFlow means the flow is not in the software table.
var ErrNoFlow = errors.New("no such flow")

// Config sizes and configures a probe when it is loaded.
type Config struct {
	// Capacity is the flow table's size; a full table refuses new flows
	// (counted) and never evicts. The table is preallocated: about 200
	// bytes per flow, 200 MiB at the default.
	Capacity int
	// DPIPackets is how many packets of each new flow are sampled.
	DPIPackets int
	// SnapLen caps the bytes of a sample, from the IP header on.
	SnapLen int
	// RingBytes is the sample ring buffer's size: a power of two, at
	// least a page. Each sample takes a fixed 1096 bytes of it.
	RingBytes int
	// Inline forwards packets to the egress port (SetEgress) instead of
	// consuming them.
	Inline bool
	// Polled is for a reader that calls ReadSamples on its own clock: the
	// program then wakes it only once a quarter of the ring is waiting,
	// not for every sample. At thousands of new flows a second the wake-ups
	// (a scheduler round trip each, dearer still in a VM) cost more CPU
	// than the DPI; a poll every few milliseconds reads them in batches.
	Polled bool
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Capacity, DefaultCapacity)
	def(&c.DPIPackets, DefaultDPIPackets)
	def(&c.SnapLen, DefaultSnapLen)
	def(&c.RingBytes, DefaultRingBytes)
	switch {
	case c.Capacity < 1 || c.Capacity > MaxCapacity:
		return c, fmt.Errorf("%w: probe capacity %d out of range 1..%d", datapath.ErrInvalid, c.Capacity, MaxCapacity)
	case c.DPIPackets < 1 || c.DPIPackets > MaxDPIPackets:
		return c, fmt.Errorf("%w: DPI packets %d out of range 1..%d", datapath.ErrInvalid, c.DPIPackets, MaxDPIPackets)
	case c.SnapLen < 1 || c.SnapLen > MaxSnapLen:
		return c, fmt.Errorf("%w: snap length %d out of range 1..%d", datapath.ErrInvalid, c.SnapLen, MaxSnapLen)
	case c.RingBytes < os.Getpagesize() || c.RingBytes > 1<<30 || bits.OnesCount(uint(c.RingBytes)) != 1:
		return c, fmt.Errorf("%w: ring buffer size %d: want a power of two from %d to 1 GiB", datapath.ErrInvalid, c.RingBytes, os.Getpagesize())
	}
	return c, nil
}

// Tier is a loaded software tier (the flow probe's XDP part; the engine is
// flowprobe.Probe): its maps and programs and, once attached, its link.
// Maps stay together in objs so that pinning and re-adoption can be added
// without reshaping the type.
type Tier struct {
	cfg  Config
	objs probeObjects
	ring *ringbuf.Reader
	link link.Link

	// Serialises ReadSamples, which reuses rec.
	readMu sync.Mutex
	rec    ringbuf.Record
	// Entries this process deleted; the program counts those it created
	// (TW_PV_FLOW_NEW), so the table's size costs no walk.
	deleted atomic.Uint64

	// Apply's batch: tw_probe_ops mapped (ops over raw), one batch at a
	// time.
	opsMu  sync.Mutex
	ops    []probeTwProbeOp
	opsRaw []byte
}

// opsLimit is TW_PROBE_OPS, the operations one run of the batch program
// takes.
const opsLimit = int(probeTwProbeOpsLimitTW_PROBE_OPS)

var _ flow.SoftwareTier = (*Tier)(nil)

// Load loads the probe with fresh maps, attached nowhere: Attach puts it on
// an interface, and tests run it through BPF_PROG_TEST_RUN.
func Load(c Config) (_ *Tier, err error) {
	c, err = c.withDefaults()
	if err != nil {
		return nil, err
	}
	spec, err := loadProbe()
	if err != nil {
		return nil, fmt.Errorf("loading probe spec: %w", err)
	}
	spec.Maps[probeMapTwProbeFlows].MaxEntries = uint32(c.Capacity)
	spec.Maps[probeMapTwProbeRing].MaxEntries = uint32(c.RingBytes)
	inline := uint32(0)
	if c.Inline {
		inline = 1
	}
	wake := uint32(0)
	if c.Polled {
		wake = uint32(c.RingBytes / 4)
	}
	for name, v := range map[string]uint32{probeVarTwProbeDpiPkts: uint32(c.DPIPackets),
		probeVarTwProbeSnaplen: uint32(c.SnapLen), probeVarTwProbeInline: inline,
		probeVarTwProbeRingWake: wake} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	p := &Tier{cfg: c}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("loading probe: %w", err)
	}
	defer func() {
		if err != nil {
			p.objs.Close()
		}
	}()
	if p.ring, err = ringbuf.NewReader(p.objs.TwProbeRing); err != nil {
		return nil, fmt.Errorf("opening sample ring: %w", err)
	}
	size := opsLimit * int(unsafe.Sizeof(probeTwProbeOp{}))
	if p.opsRaw, err = unix.Mmap(p.objs.TwProbeOps.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		p.ring.Close()
		return nil, fmt.Errorf("mapping the control batch: %w", err)
	}
	p.ops = unsafe.Slice((*probeTwProbeOp)(unsafe.Pointer(&p.opsRaw[0])), opsLimit)
	return p, nil
}

// Config is the configuration the probe was loaded with, defaults filled.
func (p *Tier) Config() Config { return p.cfg }

// Program is the XDP program (for BPF_PROG_TEST_RUN and benchmarks).
func (p *Tier) Program() *ebpf.Program { return p.objs.TwProbe }

// Attach puts the probe on ifname in native XDP mode, falling back to
// generic mode where the driver has no XDP.
func (p *Tier) Attach(ifname string) error {
	if p.link != nil {
		return fmt.Errorf("%w: probe already attached", datapath.ErrInvalid)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("%w: %s", datapath.ErrNoInterface, ifname)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.TwProbe, Interface: ifi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		l, err = link.AttachXDP(link.XDPOptions{Program: p.objs.TwProbe, Interface: ifi.Index, Flags: link.XDPGenericMode})
	}
	if err != nil {
		return fmt.Errorf("attaching probe to %s: %w", ifname, err)
	}
	p.link = l
	return nil
}

// SetEgress sets the port inline mode forwards to (0 removes it: packets
// are then dropped and counted as tx errors).
func (p *Tier) SetEgress(ifindex int) error {
	if ifindex < 0 {
		return fmt.Errorf("%w: egress ifindex %d", datapath.ErrInvalid, ifindex)
	}
	if ifindex == 0 {
		if err := p.objs.TwProbeEgress.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing egress port: %w", err)
		}
		return nil
	}
	if err := p.objs.TwProbeEgress.Put(uint32(0), uint32(ifindex)); err != nil {
		return fmt.Errorf("setting egress port %d: %w", ifindex, err)
	}
	return nil
}

// Close detaches the probe (when this process attached it) and releases
// its maps and programs.
func (p *Tier) Close() error {
	var errs []error
	if p.link != nil {
		errs = append(errs, p.link.Close())
		p.link = nil
	}
	if p.ring != nil {
		errs = append(errs, p.ring.Close())
	}
	p.opsMu.Lock()
	if p.opsRaw != nil {
		errs = append(errs, unix.Munmap(p.opsRaw))
		p.ops, p.opsRaw = nil, nil
	}
	p.opsMu.Unlock()
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// ReadSamples waits until deadline for a first sample, then hands fn the
// samples already in the ring, at most max in all. A zero deadline does
// not wait. A Polled probe is woken only by a quarter-full ring, so it
// mostly waits out the deadline and then reads what has gathered. The sample and its Data are valid only during fn.
func (p *Tier) ReadSamples(deadline time.Time, max int, fn func(*flow.Sample)) (int, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if deadline.IsZero() {
		deadline = time.Now()
	}
	p.ring.SetDeadline(deadline)
	var (
		s             flow.Sample
		base          time.Time // wall time of baseNs
		baseNs        uint64
		n             int
		rawSampleSize = int(unsafe.Sizeof(probeTwDpiSample{}))
	)
	for n < max {
		if err := p.ring.ReadInto(&p.rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n, nil
			}
			return n, fmt.Errorf("reading samples: %w", err)
		}
		if n == 0 {
			// Later reads take only what is there already.
			p.ring.SetDeadline(time.Now())
		}
		if len(p.rec.RawSample) < rawSampleSize {
			return n, fmt.Errorf("reading samples: record of %d bytes, want %d", len(p.rec.RawSample), rawSampleSize)
		}
		// The record buffer is the sample as the program wrote it; cast
		// rather than decode: the 1 KiB of data is not copied.
		raw := (*probeTwDpiSample)(unsafe.Pointer(&p.rec.RawSample[0]))
		if base.IsZero() {
			baseNs, base = raw.TsNs, flow.MonoTime(raw.TsNs)
		}
		caplen := min(int(raw.Caplen), len(raw.Data))
		s = flow.Sample{
			Key:      keyOf(&raw.Key),
			Dir:      raw.Dir,
			Seq:      raw.Seq,
			Time:     base.Add(time.Duration(int64(raw.TsNs - baseNs))),
			Hash:     raw.Hash,
			Mark:     flow.Mark(raw.Mark),
			TCPFlags: raw.TcpFlags,
			L3Len:    int(raw.L3len),
			L4Off:    int(raw.L4off),
			PayOff:   int(raw.Payoff),
			Data:     raw.Data[:caplen:caplen],
		}
		n++
		fn(&s)
	}
	return n, nil
}

// SetState moves a flow to state s with software action a, in place.
func (p *Tier) SetState(k tier.FlowKey, s flow.State, a flow.Action) error {
	ck, err := bpfKey(k)
	if err != nil {
		return err
	}
	ctl := probeTwProbeCtl{Key: ck, State: uint8(s), Action: uint8(a)}
	// The context as its bytes: a struct would be encoded by reflection,
	// which was a third of this call's user-space time.
	ctx := unsafe.Slice((*byte)(unsafe.Pointer(&ctl)), unsafe.Sizeof(ctl))
	ret, err := p.objs.TwProbeSetState.Run(&ebpf.RunOptions{Context: ctx})
	if err != nil {
		return fmt.Errorf("setting state of %s: %w", k, err)
	}
	switch probeTwProbeCtlRet(ret) {
	case probeTwProbeCtlRetTW_CTL_OK:
		return nil
	case probeTwProbeCtlRetTW_CTL_NO_FLOW:
		return fmt.Errorf("setting state of %s: %w", k, ErrNoFlow)
	}
	return fmt.Errorf("setting state of %s: control program returned %d", k, ret)
}

var _ flow.Batcher = (*Tier)(nil)

// Apply runs ops in order (flow.Batcher): up to TW_PROBE_OPS at a time
// written into the mapped tw_probe_ops and run by tw_probe_ctl_batch, one
// system call for all of them.
func (p *Tier) Apply(ops []flow.Op) error {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	if p.ops == nil {
		return fmt.Errorf("%w: the probe is closed", datapath.ErrInvalid)
	}
	mb := flow.NewMonoBase()
	// An op whose key is malformed fails alone (its Err); the others
	// still run: slot maps each slot of the batch to its op.
	var slot [opsLimit]int
	for next := 0; next < len(ops); {
		n := 0
		for ; next < len(ops) && n < opsLimit; next++ {
			o := &ops[next]
			ck, err := bpfKey(o.Key)
			if err != nil {
				o.Err = err
				continue
			}
			op := &p.ops[n]
			*op = probeTwProbeOp{Key: ck, Kind: uint8(probeTwProbeOpKindTW_OP_SET_STATE),
				State: uint8(o.State), Action: uint8(o.Action), Ret: 0xff}
			if o.Delete {
				op.Kind = uint8(probeTwProbeOpKindTW_OP_TAKE)
			}
			slot[n] = next
			n++
		}
		if n == 0 {
			continue
		}
		b := probeTwProbeBatch{N: uint32(n)}
		ctx := unsafe.Slice((*byte)(unsafe.Pointer(&b)), unsafe.Sizeof(b))
		if _, err := p.objs.TwProbeCtlBatch.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
			err = fmt.Errorf("running the control batch: %w", err)
			for _, i := range slot[:n] {
				ops[i].Err = err
			}
			p.fail(ops[next:], err)
			return err
		}
		for j, i := range slot[:n] {
			o, op := &ops[i], &p.ops[j]
			switch probeTwProbeCtlRet(op.Ret) {
			case probeTwProbeCtlRetTW_CTL_OK:
				o.Err = nil
				if o.Delete {
					o.Entry = entryOf(&op.Flow, mb)
					p.deleted.Add(1)
				}
			case probeTwProbeCtlRetTW_CTL_NO_FLOW:
				o.Err = fmt.Errorf("%s: %w", o.Key, ErrNoFlow)
			default:
				o.Err = fmt.Errorf("%s: the control batch left result %d", o.Key, op.Ret)
			}
		}
	}
	return nil
}

// fail gives every op not applied the batch's error.
func (p *Tier) fail(ops []flow.Op, err error) {
	for i := range ops {
		ops[i].Err = err
	}
}

// Lookup returns a flow's current state and counters.
func (p *Tier) Lookup(k tier.FlowKey) (flow.Entry, error) {
	ck, err := bpfKey(k)
	if err != nil {
		return flow.Entry{}, err
	}
	var v probeTwFlow
	if err := p.objs.TwProbeFlows.Lookup(&ck, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = ErrNoFlow
		}
		return flow.Entry{}, fmt.Errorf("looking up %s: %w", k, err)
	}
	return entryOf(&v, flow.NewMonoBase()), nil
}

// Delete removes a flow and returns its last counters. A packet of the
// flow in flight on another CPU may still add to the entry after it was
// read; the next packet of the flow creates a new entry.
func (p *Tier) Delete(k tier.FlowKey) (flow.Entry, error) {
	ck, err := bpfKey(k)
	if err != nil {
		return flow.Entry{}, err
	}
	var v probeTwFlow
	if err := p.objs.TwProbeFlows.LookupAndDelete(&ck, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = ErrNoFlow
		}
		return flow.Entry{}, fmt.Errorf("deleting %s: %w", k, err)
	}
	p.deleted.Add(1)
	return entryOf(&v, flow.NewMonoBase()), nil
}

// walkBatch is how many entries one batch lookup returns.
const walkBatch = 512

// Walk visits every flow in batches; fn returns false to stop. The entry
// passed to fn is reused after fn returns. Flows created or deleted during
// the walk may or may not be visited.
func (p *Tier) Walk(fn func(tier.FlowKey, *flow.Entry) bool) error {
	keys := make([]probeTwFlowKey, walkBatch)
	vals := make([]probeTwFlow, walkBatch)
	var (
		cur ebpf.MapBatchCursor
		e   flow.Entry
		mb  = flow.NewMonoBase()
	)
	for {
		n, err := p.objs.TwProbeFlows.BatchLookup(&cur, keys, vals, nil)
		for i := 0; i < n; i++ {
			e = entryOf(&vals[i], mb)
			if !fn(keyOf(&keys[i]), &e) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("walking flows: %w", err)
		}
	}
}

// Stats sums the per-CPU counters into the tier's totals.
func (p *Tier) Stats() (flow.TierStats, error) {
	c, err := p.Counters()
	if err != nil {
		return flow.TierStats{}, err
	}
	var s flow.TierStats
	for m := 0; m < flow.NumMarks; m++ {
		s.Packets[m] = c[Verdict(probeTwProbeVerdictTW_PV_MARK_NONE)+Verdict(m)].Packets
	}
	s.Refused = c[VerdictRefused].Packets
	s.Untracked = c[VerdictTableFull].Packets + c[VerdictNonIP].Packets + c[VerdictMalformed].Packets + c[VerdictFragment].Packets
	s.DPILost = c[VerdictDPILost].Packets
	created, deleted := c[VerdictFlowNew].Packets, p.deleted.Load()
	if created > deleted {
		s.Flows = int(created - deleted)
	}
	s.Capacity = p.cfg.Capacity
	return s, nil
}

// Counter is one of the probe's counters summed over the CPUs. Events
// (flows created, refusals, samples) count in Packets only.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// Counters returns every counter of the program, indexed by Verdict.
func (p *Tier) Counters() ([NumVerdicts]Counter, error) {
	var out [NumVerdicts]Counter
	var per []probeTwCtr
	for v := range out {
		if err := p.objs.TwProbeStats.Lookup(uint32(v), &per); err != nil {
			return out, fmt.Errorf("reading probe counter %s: %w", Verdict(v), err)
		}
		for _, c := range per {
			out[v].Packets += c.Packets
			out[v].Bytes += c.Bytes
		}
	}
	return out, nil
}

// bpfKey converts a flow key to the table's key, checking that it is one
// the program could have built (sorted, one family).
func bpfKey(k tier.FlowKey) (probeTwFlowKey, error) {
	if err := k.Validate(); err != nil {
		return probeTwFlowKey{}, err
	}
	ck := probeTwFlowKey{Family: 6, Proto: k.Proto,
		PortLo: bits.ReverseBytes16(k.Lo.Port()), PortHi: bits.ReverseBytes16(k.Hi.Port())}
	if k.Lo.Addr().Is4() {
		ck.Family = 4
		lo, hi := k.Lo.Addr().As4(), k.Hi.Addr().As4()
		copy(ck.AddrLo[:], lo[:])
		copy(ck.AddrHi[:], hi[:])
	} else {
		ck.AddrLo, ck.AddrHi = k.Lo.Addr().As16(), k.Hi.Addr().As16()
	}
	return ck, nil
}

// keyOf converts a key the program built; ports are in network order.
func keyOf(ck *probeTwFlowKey) tier.FlowKey {
	lo, hi := netip.AddrFrom16(ck.AddrLo), netip.AddrFrom16(ck.AddrHi)
	if ck.Family == 4 {
		lo = netip.AddrFrom4([4]byte(ck.AddrLo[:4]))
		hi = netip.AddrFrom4([4]byte(ck.AddrHi[:4]))
	}
	return tier.FlowKey{Proto: ck.Proto,
		Lo: netip.AddrPortFrom(lo, bits.ReverseBytes16(ck.PortLo)),
		Hi: netip.AddrPortFrom(hi, bits.ReverseBytes16(ck.PortHi))}
}

func entryOf(v *probeTwFlow, mb flow.MonoBase) flow.Entry {
	// One clock reading for both: converted apart, equal times would
	// come out in the wrong order.
	first := mb.Time(v.FirstNs)
	return flow.Entry{
		Packets:  v.Packets,
		Bytes:    v.Bytes,
		TCPFlags: v.TcpFlags,
		First:    first,
		Last:     first.Add(time.Duration(int64(v.LastNs - v.FirstNs))),
		Hash:     v.Hash,
		DPISent:  v.DpiSent,
		DPILost:  v.DpiLost,
		State:    flow.State(v.State),
		Action:   flow.Action(v.Action),
		InitDir:  v.InitDir,
		Marks:    v.Marks,
	}
}

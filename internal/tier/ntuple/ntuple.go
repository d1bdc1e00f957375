// SPDX-License-Identifier: Apache-2.0

// Package ntuple is the tier.Table backend for NICs with ethtool n-tuple
// filters (Intel Flow Director and others): drop rules (ring cookie
// RX_CLS_FLOW_DISC, the "action -1" of `ethtool -N`) and, for flows, steer
// to queue 0 as the forward action.
//
// The ioctl structs are encoded here by hand: ethtool's netlink interface
// has no n-tuple commands and no Go library covers the ioctl. Layout and
// constants are from linux/ethtool.h; testdata/gen_golden.c produces the
// reference bytes from that header and the tests compare against them.
//
// Hardware keeps no per-rule counters for n-tuple rules, so entries are
// listed with HasCounters false; placement then keeps the rate it last
// measured in software for such a source (see placement.Offloader).
package ntuple

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/tier"
)

// linux/ethtool.h
const (
	cmdGetRuleCount = 0x2e // ETHTOOL_GRXCLSRLCNT
	cmdGetRule      = 0x2f // ETHTOOL_GRXCLSRULE
	cmdGetAll       = 0x30 // ETHTOOL_GRXCLSRLALL
	cmdDelRule      = 0x31 // ETHTOOL_SRXCLSRLDEL
	cmdInsRule      = 0x32 // ETHTOOL_SRXCLSRLINS

	tcpV4Flow    = 0x01
	udpV4Flow    = 0x02
	tcpV6Flow    = 0x05
	udpV6Flow    = 0x06
	ipUserFlow   = 0x0d
	ipv6UserFlow = 0x0e
	ethRxNfcIP4  = 1
	flowDisc     = ^uint64(0) // RX_CLS_FLOW_DISC
	locSpecial   = 0x80000000 // RX_CLS_LOC_SPECIAL

	rxnfcSize = 192 // sizeof(struct ethtool_rxnfc)
	offFS     = 16  // fs
	offHU     = offFS + 4
	offMU     = offFS + 4 + 52 + 20
	offCookie = offFS + 152
	offLoc    = offFS + 160
	offCnt    = offFS + 168 // rule_cnt
)

// encodeIns is the ethtool_rxnfc for inserting r at location loc.
func encodeIns(loc uint32, r tier.Rule) ([]byte, error) {
	b := make([]byte, rxnfcSize)
	binary.NativeEndian.PutUint32(b, cmdInsRule)
	m := r.Match
	h, mk := b[offHU:offHU+52], b[offMU:offMU+52]
	ones := func(p []byte) {
		for i := range p {
			p[i] = 0xff
		}
	}
	var ft uint32
	switch {
	case !m.IsFlow() && m.Src.Is4():
		ft = ipUserFlow
		a := m.Src.As4()
		copy(h[0:4], a[:])
		ones(mk[0:4])
		h[13] = ethRxNfcIP4 // ip_ver
	case !m.IsFlow():
		ft = ipv6UserFlow
		a := m.Src.As16()
		copy(h[0:16], a[:])
		ones(mk[0:16])
	case m.Proto != unix.IPPROTO_TCP && m.Proto != unix.IPPROTO_UDP:
		return nil, fmt.Errorf("%w: n-tuple flows are TCP or UDP, not protocol %d", tier.ErrUnsupported, m.Proto)
	case m.Src.Is4():
		ft = tcpV4Flow
		if m.Proto == unix.IPPROTO_UDP {
			ft = udpV4Flow
		}
		s, d := m.Src.As4(), m.Dst.As4()
		copy(h[0:4], s[:])
		copy(h[4:8], d[:])
		binary.BigEndian.PutUint16(h[8:], m.SrcPort)
		binary.BigEndian.PutUint16(h[10:], m.DstPort)
		ones(mk[0:12])
	default:
		ft = tcpV6Flow
		if m.Proto == unix.IPPROTO_UDP {
			ft = udpV6Flow
		}
		s, d := m.Src.As16(), m.Dst.As16()
		copy(h[0:16], s[:])
		copy(h[16:32], d[:])
		binary.BigEndian.PutUint16(h[32:], m.SrcPort)
		binary.BigEndian.PutUint16(h[34:], m.DstPort)
		ones(mk[0:36])
	}
	binary.NativeEndian.PutUint32(b[offFS:], ft)
	cookie := flowDisc
	if r.Action == tier.Forward {
		cookie = 0 // queue 0: delivered as usual
	}
	binary.NativeEndian.PutUint64(b[offCookie:], cookie)
	binary.NativeEndian.PutUint32(b[offLoc:], loc)
	return b, nil
}

// decodeRule parses a rule read back with ETHTOOL_GRXCLSRULE.
func decodeRule(b []byte) (tier.Rule, error) {
	var r tier.Rule
	h := b[offHU : offHU+52]
	r.Action = tier.Drop
	if binary.NativeEndian.Uint64(b[offCookie:]) != flowDisc {
		r.Action = tier.Forward
	}
	switch ft := binary.NativeEndian.Uint32(b[offFS:]) &^ 0xff000000; ft { // strip FLOW_EXT & co
	case ipUserFlow:
		r.Match.Src = netip.AddrFrom4([4]byte(h[0:4]))
	case ipv6UserFlow:
		r.Match.Src = netip.AddrFrom16([16]byte(h[0:16]))
	case tcpV4Flow, udpV4Flow:
		r.Match = tier.Match{Src: netip.AddrFrom4([4]byte(h[0:4])), Dst: netip.AddrFrom4([4]byte(h[4:8])),
			SrcPort: binary.BigEndian.Uint16(h[8:]), DstPort: binary.BigEndian.Uint16(h[10:]), Proto: unix.IPPROTO_TCP}
		if ft == udpV4Flow {
			r.Match.Proto = unix.IPPROTO_UDP
		}
	case tcpV6Flow, udpV6Flow:
		r.Match = tier.Match{Src: netip.AddrFrom16([16]byte(h[0:16])), Dst: netip.AddrFrom16([16]byte(h[16:32])),
			SrcPort: binary.BigEndian.Uint16(h[32:]), DstPort: binary.BigEndian.Uint16(h[34:]), Proto: unix.IPPROTO_TCP}
		if ft == udpV6Flow {
			r.Match.Proto = unix.IPPROTO_UDP
		}
	default:
		return r, fmt.Errorf("n-tuple flow type %#x is not one tierwall writes", ft)
	}
	return r, nil
}

// ifreq is struct ifreq with ifr_data.
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// ethtool issues SIOCETHTOOL with buf as the command struct.
func ethtool(fd int, iface string, buf []byte) error {
	var ifr ifreq
	copy(ifr.name[:], iface)
	ifr.data = unsafe.Pointer(&buf[0])
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return errno
	}
	return nil
}

// Table is the n-tuple table of one interface. tierwall owns the
// locations [base, base+capacity): rules found there on start are
// re-adopted as its own, and nothing outside that range is touched.
type Table struct {
	mu    sync.Mutex
	fd    int
	iface string
	base  uint32
	cap   int
	rules map[tier.Match]uint32 // location of each rule
	used  map[uint32]bool
}

var _ tier.Table = (*Table)(nil)

// Open probes n-tuple support on iface. capacity 0 takes the table size
// the driver reports, minus base.
func Open(iface string, base uint32, capacity int) (_ *Table, err error) {
	if len(iface) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("%w: interface name %q too long", tier.ErrInvalid, iface)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ntuple: socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	cnt := make([]byte, rxnfcSize)
	binary.NativeEndian.PutUint32(cnt, cmdGetRuleCount)
	if err := ethtool(fd, iface, cnt); err != nil {
		return nil, fmt.Errorf("%w: n-tuple filters on %s: %v", tier.ErrUnsupported, iface, err)
	}
	size := int(binary.NativeEndian.Uint64(cnt[8:]) &^ locSpecial)
	if capacity == 0 {
		capacity = size - int(base)
	}
	if capacity <= 0 || (size > 0 && int(base)+capacity > size) {
		return nil, fmt.Errorf("%w: locations %d..%d outside the %d-rule table of %s", tier.ErrInvalid, base, int(base)+capacity-1, size, iface)
	}
	t := &Table{fd: fd, iface: iface, base: base, cap: capacity, rules: map[tier.Match]uint32{}, used: map[uint32]bool{}}
	if err := t.adopt(int(binary.NativeEndian.Uint32(cnt[offCnt:]))); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Table) adopt(n int) error {
	if n == 0 {
		return nil
	}
	buf := make([]byte, rxnfcSize+4*n)
	binary.NativeEndian.PutUint32(buf, cmdGetAll)
	binary.NativeEndian.PutUint32(buf[offCnt:], uint32(n))
	if err := ethtool(t.fd, t.iface, buf); err != nil {
		return fmt.Errorf("listing n-tuple rules on %s: %w", t.iface, err)
	}
	for i := 0; i < n; i++ {
		loc := binary.NativeEndian.Uint32(buf[rxnfcSize+4*i:])
		if loc < t.base || loc >= t.base+uint32(t.cap) {
			continue
		}
		r, err := t.read(loc)
		if err != nil {
			return err
		}
		t.rules[r.Match] = loc
		t.used[loc] = true
	}
	return nil
}

func (t *Table) read(loc uint32) (tier.Rule, error) {
	b := make([]byte, rxnfcSize)
	binary.NativeEndian.PutUint32(b, cmdGetRule)
	binary.NativeEndian.PutUint32(b[offLoc:], loc)
	if err := ethtool(t.fd, t.iface, b); err != nil {
		return tier.Rule{}, fmt.Errorf("reading n-tuple rule %d on %s: %w", loc, t.iface, err)
	}
	return decodeRule(b)
}

func (t *Table) Caps() tier.Caps {
	return tier.Caps{Backend: "ethtool-ntuple", Iface: t.iface, Capacity: t.cap, Counters: false, Flows: true, Forward: true}
}

func (t *Table) Install(ctx context.Context, r tier.Rule) (time.Duration, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.rules[r.Match]; ok {
		return 0, nil
	}
	loc, ok := uint32(0), false
	for l := t.base; l < t.base+uint32(t.cap); l++ {
		if !t.used[l] {
			loc, ok = l, true
			break
		}
	}
	if !ok {
		return 0, fmt.Errorf("%w: %d of %d n-tuple rules in use", tier.ErrTableFull, len(t.rules), t.cap)
	}
	b, err := encodeIns(loc, r)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := ethtool(t.fd, t.iface, b); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return 0, fmt.Errorf("%w: %v", tier.ErrTableFull, err)
		}
		return 0, fmt.Errorf("inserting n-tuple rule %s on %s: %w", r.Match, t.iface, err)
	}
	// Confirm by reading it back: a driver that accepted and dropped the
	// rule must not leave it recorded as offloaded.
	back, err := t.read(loc)
	if err != nil || back != r {
		err = fmt.Errorf("%w: %s at location %d (read back %+v, %v)", tier.ErrNotInHardware, r.Match, loc, back, err)
		if derr := t.del(loc); derr != nil {
			// Whatever the driver holds at loc may still be there: keep
			// the location marked used so that no later rule is written
			// over it (Open re-adopts it on the next start).
			t.used[loc] = true
			return 0, errors.Join(err, fmt.Errorf("deleting n-tuple rule %d on %s: %w", loc, t.iface, derr))
		}
		return 0, err
	}
	t.rules[r.Match] = loc
	t.used[loc] = true
	return time.Since(start), nil
}

func (t *Table) del(loc uint32) error {
	b := make([]byte, rxnfcSize)
	binary.NativeEndian.PutUint32(b, cmdDelRule)
	binary.NativeEndian.PutUint32(b[offLoc:], loc)
	return ethtool(t.fd, t.iface, b)
}

func (t *Table) Remove(ctx context.Context, m tier.Match) (tier.Counters, time.Duration, error) {
	if err := m.Validate(); err != nil {
		return tier.Counters{}, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	loc, ok := t.rules[m]
	if !ok {
		return tier.Counters{}, 0, fmt.Errorf("%w: %s", tier.ErrNoRule, m)
	}
	start := time.Now()
	if err := t.del(loc); err != nil {
		return tier.Counters{}, 0, fmt.Errorf("deleting n-tuple rule %d on %s: %w", loc, t.iface, err)
	}
	delete(t.rules, m)
	delete(t.used, loc)
	return tier.Counters{}, time.Since(start), nil
}

func (t *Table) List(ctx context.Context) ([]tier.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]tier.Entry, 0, len(t.rules))
	for _, loc := range t.rules {
		r, err := t.read(loc)
		if err != nil {
			return nil, err
		}
		out = append(out, tier.Entry{Rule: r})
	}
	return out, nil
}

func (t *Table) Close() error { return unix.Close(t.fd) }

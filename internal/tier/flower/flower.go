// SPDX-License-Identifier: Apache-2.0

// Package flower is tierwall's backend for NICs with tc flower offload
// (mlx5, ice, nfp, ...), both tables on the clsact ingress hook, with
// skip_sw so their filters exist only in hardware:
//
//   - Table (tier.Table), the mitigation tier: one flower filter per rule
//     at Priority (IPv4) or Priority6 (IPv6), a gact action (drop, or pass
//     for forwarded flows) carrying the cookie "tierwall".
//   - FlowTable (tier.FlowTable), the flow probe's flow table: two
//     filters per learned flow, one per direction, matching the exact
//     5-tuple at FlowPriority4 or FlowPriority6, with gact drop (discard)
//     or pass (forward) and the cookie "tierwall" plus the flow's id. A
//     worker plays the firmware flower lacks: it serves learns and
//     unlearns asynchronously, polls the filters' hardware counters with
//     one dump per address family and ages flows by them (idle: no new
//     packets; lifetime), reporting every outcome as a tier.FlowEvent.
//     Flower has no marks and sees no FIN: a packet reaching the host
//     missed the table, and TCP flows end idle.
//
// The two use different priorities (two each: one protocol per priority),
// so each lists and re-adopts (Table) or deletes at start (FlowTable, which
// has no state across restarts) only its own filters.
//
// The netlink messages are built here with mdlayher/netlink's attribute
// encoder rather than with go-tc: go-tc v0.4.8 has no IPv6 flower keys and
// no way to obtain an encoded message, which the golden tests need (this
// kernel has no flower, so the encoding is checked byte for byte against
// what the tc command sends; vishvananda/netlink v1.3.1 gets the skip flags'
// byte order wrong). Attribute numbers are from linux/pkt_cls.h.
package flower

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/tier"
)

// The mitigation Table's tc priorities: Priority for IPv4 rules, Priority6
// for IPv6 ones; with the action cookie they identify our filters among
// anyone else's.
//
// Two because the kernel keeps one protocol per (chain, priority):
// cls_api.c, tcf_chain_tp_find, refuses a filter whose protocol differs
// from the one already at its priority with EINVAL ("Specified filter
// protocol does not match..."), so at one shared priority the first family
// installed kept the other out. IPv4 keeps 0xBEEF, the priority of every
// rule before, so a restarted tierwall still finds the IPv4 filters an
// earlier version left (Open moves IPv6 ones it left there, which would
// keep IPv4 out). IPv6 takes 0xBEEE, below rather than above: tc runs lower
// priorities first, and both mitigation priorities must sort before the
// flow table's FlowPriority4 and FlowPriority6 so that a mitigation drop
// matches before the flow probe's filters (a learned flow's pass).
const (
	Priority  = 0xBEEF
	Priority6 = 0xBEEE
)

// mitigationPrio is the mitigation Table's priority for family fam.
func mitigationPrio(fam uint16) uint16 {
	if fam == ethPIPv6 {
		return Priority6
	}
	return Priority
}

// Cookie marks tierwall's actions (the bytes "tierwall").
var Cookie = []byte("tierwall")

// linux/pkt_cls.h, linux/pkt_sched.h, linux/gen_stats.h, linux/rtnetlink.h
const (
	tcaKind    = 1
	tcaOptions = 2

	flowerAct         = 3
	flowerKeyEthType  = 8
	flowerKeyIPProto  = 9
	flowerKeyIPv4Src  = 10
	flowerKeyIPv4SrcM = 11
	flowerKeyIPv4Dst  = 12
	flowerKeyIPv4DstM = 13
	flowerKeyIPv6Src  = 14
	flowerKeyIPv6SrcM = 15
	flowerKeyIPv6Dst  = 16
	flowerKeyIPv6DstM = 17
	flowerKeyTCPSrc   = 18
	flowerKeyTCPDst   = 19
	flowerKeyUDPSrc   = 20
	flowerKeyUDPDst   = 21
	flowerFlags       = 22
	flowerInHWCount   = 86
	clsFlagsSkipHW    = 1 << 0
	clsFlagsSkipSW    = 1 << 1
	clsFlagsInHW      = 1 << 2
	actKind           = 1
	actOptions        = 2
	actStats          = 4
	actCookie         = 6
	gactParms         = 2
	tcActOK           = 0
	tcActShot         = 2
	statsBasic        = 1
	statsBasicHW      = 7
	statsPkt64        = 8
	parentIngress     = 0xFFFFFFF2 // TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)
	parentClsact      = 0xFFFFFFF1
	clsactHandle      = 0xFFFF0000
	tcmsgLen          = 20
	ethPIP            = 0x0800
	ethPIPv6          = 0x86DD
	nlaFNested        = 0x8000
	actPrio           = 1
	defaultFlowerCap  = 1024
	probeHandle       = 0xFFFFFF
	firstHandle       = 1
	maxHandle         = probeHandle - 1
)

// nest encodes a nested attribute the way tc does: without setting
// NLA_F_NESTED (mdlayher/netlink's Nested always sets it), which callers
// add to typ where tc sets it too.
func nest(ae *netlink.AttributeEncoder, typ uint16, fn func(*netlink.AttributeEncoder) error) {
	inner := netlink.NewAttributeEncoder()
	ae.Do(typ, func() ([]byte, error) {
		if err := fn(inner); err != nil {
			return nil, err
		}
		return inner.Encode()
	})
}

// tcmsg encodes struct tcmsg.
func tcmsg(ifindex int, handle, parent uint32, prio uint16, proto uint16) []byte {
	b := make([]byte, tcmsgLen)
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	binary.NativeEndian.PutUint32(b[8:], handle)
	binary.NativeEndian.PutUint32(b[12:], parent)
	// tcm_info: priority in the high half, protocol (network order) low.
	binary.NativeEndian.PutUint32(b[16:], uint32(prio)<<16|uint32(htons(proto)))
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func family(m tier.Match) uint16 {
	if m.Src.Is4() {
		return ethPIP
	}
	return ethPIPv6
}

// encodeAdd is the RTM_NEWTFILTER body for rule r under handle, in the
// attribute order tc uses.
func encodeAdd(ifindex int, handle uint32, r tier.Rule) ([]byte, error) {
	return encodeFilter(ifindex, handle, mitigationPrio(family(r.Match)), r, Cookie)
}

// encodeFilter is encodeAdd at priority prio with the action cookie
// cookie (at most 16 bytes, TC_COOKIE_MAX_SIZE).
func encodeFilter(ifindex int, handle uint32, prio uint16, r tier.Rule, cookie []byte) ([]byte, error) {
	return encodeFilterFlags(ifindex, handle, prio, r, cookie, clsFlagsSkipSW)
}

// encodeFilterFlags is encodeFilter with the filter's skip flag:
// clsFlagsSkipSW (hardware only, the product) or clsFlagsSkipHW (software
// only, a Software table).
func encodeFilterFlags(ifindex int, handle uint32, prio uint16, r tier.Rule, cookie []byte, skip uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, "flower")
	nest(ae, tcaOptions, func(o *netlink.AttributeEncoder) error {
		m := r.Match
		if m.IsFlow() {
			o.Uint8(flowerKeyIPProto, m.Proto)
		}
		if m.Src.Is4() {
			o.Bytes(flowerKeyIPv4Src, m.Src.AsSlice())
			o.Bytes(flowerKeyIPv4SrcM, []byte{0xff, 0xff, 0xff, 0xff})
			if m.IsFlow() {
				o.Bytes(flowerKeyIPv4Dst, m.Dst.AsSlice())
				o.Bytes(flowerKeyIPv4DstM, []byte{0xff, 0xff, 0xff, 0xff})
			}
		} else {
			full := make([]byte, 16)
			for i := range full {
				full[i] = 0xff
			}
			o.Bytes(flowerKeyIPv6Src, m.Src.AsSlice())
			o.Bytes(flowerKeyIPv6SrcM, full)
			if m.IsFlow() {
				o.Bytes(flowerKeyIPv6Dst, m.Dst.AsSlice())
				o.Bytes(flowerKeyIPv6DstM, full)
			}
		}
		if m.IsFlow() && (m.SrcPort != 0 || m.DstPort != 0) {
			src, dst := uint16(flowerKeyTCPSrc), uint16(flowerKeyTCPDst)
			if m.Proto == unix.IPPROTO_UDP {
				src, dst = flowerKeyUDPSrc, flowerKeyUDPDst
			}
			o.Uint16(src, htons(m.SrcPort))
			o.Uint16(dst, htons(m.DstPort))
		}
		nest(o, flowerAct, func(a *netlink.AttributeEncoder) error {
			nest(a, actPrio, func(g *netlink.AttributeEncoder) error {
				g.String(actKind, "gact")
				nest(g, actOptions|nlaFNested, func(p *netlink.AttributeEncoder) error {
					parms := make([]byte, 20) // struct tc_gact
					verdict := uint32(tcActShot)
					if r.Action == tier.Forward {
						verdict = tcActOK
					}
					binary.NativeEndian.PutUint32(parms[8:], verdict)
					p.Bytes(gactParms, parms)
					return nil
				})
				g.Bytes(actCookie, cookie)
				return nil
			})
			return nil
		})
		o.Uint32(flowerFlags, skip)
		o.Uint16(flowerKeyEthType, htons(family(m)))
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("encoding flower filter: %w", err)
	}
	return append(tcmsg(ifindex, handle, parentIngress, prio, family(r.Match)), attrs...), nil
}

// encodeDel is the RTM_DELTFILTER body for the filter under handle.
func encodeDel(ifindex int, handle uint32, fam uint16) ([]byte, error) {
	return encodeDelAt(ifindex, handle, mitigationPrio(fam), fam)
}

// encodeDelAt is encodeDel at priority prio; RTM_GETTFILTER takes the
// same selector.
func encodeDelAt(ifindex int, handle uint32, prio uint16, fam uint16) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, "flower")
	nest(ae, tcaOptions, func(o *netlink.AttributeEncoder) error {
		o.Uint32(flowerFlags, 0)
		o.Uint16(flowerKeyEthType, htons(fam))
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(tcmsg(ifindex, handle, parentIngress, prio, fam), attrs...), nil
}

// filter is one decoded flower filter.
type filter struct {
	handle   uint32
	prio     uint16
	rule     tier.Rule
	cookie   []byte
	inHW     bool
	hwCount  uint32
	counters tier.Counters // the rule's, by pickCounters
	// The action's stats as the kernel reports them: hardware only, and
	// combined (software and hardware).
	hwCtr, allCtr tier.Counters
	sawHW         bool
}

// decodeFilter parses an RTM_NEWTFILTER message (a dump or get reply).
// ok is false for filters that are not tierwall's mitigation rules: at
// either mitigation priority (whichever family: Open moves the IPv6 rules
// an earlier version put at Priority) with the cookie "tierwall".
func decodeFilter(b []byte) (f filter, ok bool, err error) {
	f, ok, err = parseFilter(b, Priority, Priority6)
	if err != nil || !ok || string(f.cookie) != string(Cookie) {
		return f, false, err
	}
	return f, true, nil
}

// parseFilter parses an RTM_NEWTFILTER message of a flower filter at one
// of prios with a source key; ok is false for any other filter.
func parseFilter(b []byte, prios ...uint16) (f filter, ok bool, err error) {
	if len(b) < tcmsgLen {
		return f, false, fmt.Errorf("short tcmsg (%d bytes)", len(b))
	}
	info := binary.NativeEndian.Uint32(b[16:])
	f.prio = uint16(info >> 16)
	mine := false
	for _, p := range prios {
		mine = mine || f.prio == p
	}
	if !mine {
		return f, false, nil
	}
	f.handle = binary.NativeEndian.Uint32(b[8:])
	ad, err := netlink.NewAttributeDecoder(b[tcmsgLen:])
	if err != nil {
		return f, false, err
	}
	var kind string
	var m tier.Match
	var src, dst []byte
	for ad.Next() {
		switch ad.Type() {
		case tcaKind:
			kind = ad.String()
		case tcaOptions:
			ad.Nested(func(o *netlink.AttributeDecoder) error {
				for o.Next() {
					switch o.Type() {
					case flowerKeyIPProto:
						m.Proto = o.Uint8()
					case flowerKeyIPv4Src, flowerKeyIPv6Src:
						src = o.Bytes()
					case flowerKeyIPv4Dst, flowerKeyIPv6Dst:
						dst = o.Bytes()
					case flowerKeyTCPSrc, flowerKeyUDPSrc:
						m.SrcPort = htons(o.Uint16())
					case flowerKeyTCPDst, flowerKeyUDPDst:
						m.DstPort = htons(o.Uint16())
					case flowerFlags:
						f.inHW = o.Uint32()&clsFlagsInHW != 0
					case flowerInHWCount:
						f.hwCount = o.Uint32()
					case flowerAct:
						o.Nested(func(a *netlink.AttributeDecoder) error {
							for a.Next() {
								a.Nested(func(g *netlink.AttributeDecoder) error {
									decodeAction(g, &f)
									return nil
								})
							}
							return nil
						})
					}
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return f, false, fmt.Errorf("decoding flower filter: %w", err)
	}
	f.pickCounters()
	if kind != "flower" || f.cookie == nil {
		return f, false, nil
	}
	var okSrc bool
	if m.Src, okSrc = netip.AddrFromSlice(src); !okSrc {
		return f, false, fmt.Errorf("tierwall filter %d without a source key", f.handle)
	}
	if dst != nil {
		m.Dst, _ = netip.AddrFromSlice(dst)
	}
	f.rule.Match = m
	return f, true, nil
}

func decodeAction(g *netlink.AttributeDecoder, f *filter) {
	for g.Next() {
		switch g.Type() {
		case actCookie:
			f.cookie = g.Bytes()
		case actOptions:
			g.Nested(func(p *netlink.AttributeDecoder) error {
				for p.Next() {
					if p.Type() == gactParms {
						if b := p.Bytes(); len(b) >= 12 {
							f.rule.Action = tier.Drop
							if binary.NativeEndian.Uint32(b[8:]) == tcActOK {
								f.rule.Action = tier.Forward
							}
						}
					}
				}
				return nil
			})
		case actStats:
			g.Nested(func(s *netlink.AttributeDecoder) error {
				var last *tier.Counters // what a following 64-bit count belongs to
				for s.Next() {
					switch t := s.Type(); t {
					case statsBasicHW, statsBasic:
						last = &f.allCtr
						if t == statsBasicHW {
							last, f.sawHW = &f.hwCtr, true
						}
						if b := s.Bytes(); len(b) >= 12 {
							*last = tier.Counters{Bytes: binary.NativeEndian.Uint64(b), Packets: uint64(binary.NativeEndian.Uint32(b[8:]))}
						} else {
							last = nil
						}
					case statsPkt64:
						// gnet_stats_basic's packets are 32 bits:
						// the kernel follows it with the 64-bit
						// count once that wraps (4G packets, half a
						// minute of a 100G link's small packets).
						if b := s.Bytes(); last != nil && len(b) >= 8 {
							last.Packets = binary.NativeEndian.Uint64(b)
						}
						last = nil
					default:
						last = nil
					}
				}
				return nil
			})
		}
	}
}

// pickCounters: a filter in hardware counts in hardware (the driver's
// stats); one in software only (skip_hw, or a driver that refused it) has
// hardware stats that are always 0, and counts in the combined ones.
func (f *filter) pickCounters() {
	f.counters = f.allCtr
	if f.inHW && f.sawHW {
		f.counters = f.hwCtr
	}
}

// Table is the flower hardware table of one interface.
type Table struct {
	mu sync.Mutex
	tcLink
	cap   int
	rules map[tier.Match]uint32 // handle of each rule
	next  uint32
}

var _ tier.Table = (*Table)(nil)

// Open probes flower offload on iface and re-adopts tierwall's filters
// already there. capacity is what the operator says the NIC holds (0: 1024);
// flower has no query for it. When the probe fails the error wraps
// tier.ErrUnsupported and nothing is left behind.
func Open(iface string, capacity int) (*Table, error) {
	return openTable(iface, capacity, false)
}

// OpenSoftware is Open with the rules in the kernel's software path
// (skip_hw): the backend's whole netlink path against a real cls_flower on
// an interface that offloads nothing (a veth), with counters. It protects
// nothing XDP does not already; it is there to test the backend on a
// kernel with flower (Debian's), where no NIC is at hand.
func OpenSoftware(iface string, capacity int) (*Table, error) {
	return openTable(iface, capacity, true)
}

func openTable(iface string, capacity int, software bool) (*Table, error) {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink: %w", err)
	}
	t, err := open(conn, iface, capacity, software)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return t, nil
}

func open(conn *netlink.Conn, iface string, capacity int, software bool) (*Table, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%w: flower: no interface %s", tier.ErrUnsupported, iface)
	}
	if capacity == 0 {
		capacity = defaultFlowerCap
	}
	t := &Table{tcLink: tcLink{conn: conn, iface: iface, ifindex: ifc.Index, software: software}, cap: capacity, rules: map[tier.Match]uint32{}, next: firstHandle}
	created, err := t.ensureClsact()
	if err != nil {
		return nil, fmt.Errorf("%w: flower on %s: clsact qdisc: %v", tier.ErrUnsupported, iface, err)
	}
	undo := func() {
		if created {
			t.deleteClsact()
		}
	}
	fs, err := t.dump()
	if err != nil {
		undo()
		return nil, err
	}
	// Before adding anything: move the IPv6 rules an earlier version put
	// at Priority, where they keep every IPv4 filter out (the probe's
	// included).
	if err := t.moveMisplaced(fs); err != nil {
		undo()
		return nil, err
	}
	// Probe each priority with a rule no packet matches (TEST-NET
	// broadcast), then take it out again: only a filter that reached
	// hardware counts, and the kernel says here if either priority holds
	// another protocol.
	probes := []tier.Rule{
		{Match: tier.SourceMatch(netip.MustParseAddr("192.0.2.255")), Action: tier.Drop},
		{Match: tier.SourceMatch(netip.MustParseAddr("2001:db8::ffff")), Action: tier.Drop},
	}
	for _, probe := range probes {
		fam := family(probe.Match)
		if _, err := t.add(probeHandle, probe); err != nil {
			undo()
			return nil, fmt.Errorf("%w: flower offload on %s at priority %#x: %v", tier.ErrUnsupported, iface, mitigationPrio(fam), err)
		}
		if err := t.del(probeHandle, fam); err != nil {
			undo()
			return nil, fmt.Errorf("%w: flower on %s: removing probe: %v", tier.ErrUnsupported, iface, err)
		}
	}
	for _, f := range fs {
		t.rules[f.rule.Match] = f.handle
		if f.handle >= t.next {
			t.next = f.handle + 1
		}
	}
	return t, nil
}

// tcLink is an rtnetlink socket on one interface's clsact ingress hook:
// what the mitigation Table and the FlowTable share.
type tcLink struct {
	conn    *netlink.Conn
	iface   string
	ifindex int
	// software puts filters in the kernel's software path (skip_hw)
	// instead of the NIC (skip_sw): the same netlink, dumps and counters
	// against a real cls_flower on an interface with no offload (veth),
	// which is how the tests run the backend on a kernel that has flower.
	software bool
}

func (t *tcLink) execute(typ netlink.HeaderType, flags netlink.HeaderFlags, body []byte) ([]netlink.Message, error) {
	return t.conn.Execute(netlink.Message{Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Acknowledge | flags}, Data: body})
}

func (t *tcLink) ensureClsact() (created bool, err error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, "clsact")
	attrs, err := ae.Encode()
	if err != nil {
		return false, err
	}
	body := append(tcmsg(t.ifindex, clsactHandle, parentClsact, 0, 0), attrs...)
	binary.NativeEndian.PutUint32(body[16:], 0)
	_, err = t.execute(unix.RTM_NEWQDISC, netlink.Create|netlink.Excl, body)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	return err == nil, err
}

func (t *tcLink) deleteClsact() {
	body := tcmsg(t.ifindex, clsactHandle, parentClsact, 0, 0)
	binary.NativeEndian.PutUint32(body[16:], 0)
	_, _ = t.execute(unix.RTM_DELQDISC, 0, body)
}

// addFilter installs r at prio under handle and confirms it is in
// hardware; a filter that is not is removed again and reported as
// ErrNotInHardware.
func (t *tcLink) addFilter(handle uint32, prio uint16, r tier.Rule, cookie []byte) (time.Duration, error) {
	skip := uint32(clsFlagsSkipSW)
	if t.software {
		skip = clsFlagsSkipHW
	}
	body, err := encodeFilterFlags(t.ifindex, handle, prio, r, cookie, skip)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := t.execute(unix.RTM_NEWTFILTER, netlink.Create|netlink.Excl, body); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
			return 0, fmt.Errorf("%w: %v", tier.ErrTableFull, err)
		}
		if errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("kernel has no flower classifier (cls_flower): %w", err)
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			return 0, fmt.Errorf("driver cannot offload this filter (skip_sw): %w", err)
		}
		return 0, fmt.Errorf("adding flower filter for %s: %w", r.Match, err)
	}
	f, err := t.getFilter(handle, prio, family(r.Match))
	lat := time.Since(start)
	if err != nil || (!t.software && (!f.inHW || f.hwCount == 0)) {
		_ = t.delFilter(handle, prio, family(r.Match))
		if err == nil {
			err = fmt.Errorf("in_hw=%v in_hw_count=%d", f.inHW, f.hwCount)
		}
		return 0, fmt.Errorf("%w: %s: %v", tier.ErrNotInHardware, r.Match, err)
	}
	return lat, nil
}

func (t *tcLink) delFilter(handle uint32, prio, fam uint16) error {
	body, err := encodeDelAt(t.ifindex, handle, prio, fam)
	if err != nil {
		return err
	}
	if _, err := t.execute(unix.RTM_DELTFILTER, 0, body); err != nil {
		return fmt.Errorf("deleting flower filter %d: %w", handle, err)
	}
	return nil
}

// getFilter reads back the filter at prio under handle, whoever's it is.
func (t *tcLink) getFilter(handle uint32, prio, fam uint16) (filter, error) {
	body, err := encodeDelAt(t.ifindex, handle, prio, fam) // same selector
	if err != nil {
		return filter{}, err
	}
	msgs, err := t.conn.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_GETTFILTER, Flags: netlink.Request}, Data: body})
	if err != nil {
		return filter{}, fmt.Errorf("reading back flower filter %d: %w", handle, err)
	}
	for _, m := range msgs {
		if f, ok, err := parseFilter(m.Data, prio); err == nil && ok && f.handle == handle {
			return f, nil
		}
	}
	return filter{}, fmt.Errorf("flower filter %d not found after adding it", handle)
}

// dumpFilters lists the flower filters of family fam at prio with their
// statistics, in one dump: the kernel skips the other priorities.
func (t *tcLink) dumpFilters(prio, fam uint16) ([]filter, error) {
	body := tcmsg(t.ifindex, 0, parentIngress, prio, fam)
	msgs, err := t.conn.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_GETTFILTER, Flags: netlink.Request | netlink.Dump}, Data: body})
	if err != nil {
		return nil, fmt.Errorf("listing flower filters on %s: %w", t.iface, err)
	}
	out := make([]filter, 0, len(msgs))
	for _, m := range msgs {
		f, ok, err := parseFilter(m.Data, prio)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// moveMisplaced moves the rules in fs that are not at their family's
// priority (IPv6 rules an earlier version put at Priority) to it: the
// same rule under the same handle, added at the new priority before the
// old filter goes (the NIC's counters of the old one are lost). A rule
// already at both (a move an earlier Open did not finish) only loses its
// misplaced copy. fs is updated to the new priorities.
func (t *Table) moveMisplaced(fs []filter) error {
	placed := map[tier.Match]bool{}
	for _, f := range fs {
		if f.prio == mitigationPrio(family(f.rule.Match)) {
			placed[f.rule.Match] = true
		}
	}
	for i, f := range fs {
		fam := family(f.rule.Match)
		prio := mitigationPrio(fam)
		if f.prio == prio {
			continue
		}
		if !placed[f.rule.Match] {
			if _, err := t.add(f.handle, f.rule); err != nil {
				return fmt.Errorf("%w: flower on %s: moving rule %s from priority %#x to %#x: %v", tier.ErrUnsupported, t.iface, f.rule.Match, f.prio, prio, err)
			}
			placed[f.rule.Match] = true
		}
		if err := t.delFilter(f.handle, f.prio, fam); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("flower on %s: moving rule %s from priority %#x to %#x: %w", t.iface, f.rule.Match, f.prio, prio, err)
		}
		fs[i].prio = prio
	}
	return nil
}

func (t *Table) add(handle uint32, r tier.Rule) (time.Duration, error) {
	return t.addFilter(handle, mitigationPrio(family(r.Match)), r, Cookie)
}

func (t *Table) del(handle uint32, fam uint16) error {
	return t.delFilter(handle, mitigationPrio(fam), fam)
}

func (t *Table) get(handle uint32, fam uint16) (filter, error) {
	f, err := t.getFilter(handle, mitigationPrio(fam), fam)
	if err == nil && string(f.cookie) != string(Cookie) {
		return filter{}, fmt.Errorf("flower filter %d is not tierwall's", handle)
	}
	return f, err
}

// dump lists tierwall's mitigation filters at both priorities (one dump
// of every priority: the request keeps the dump the mitigation table
// always sent).
func (t *Table) dump() ([]filter, error) {
	body := tcmsg(t.ifindex, 0, parentIngress, 0, 0)
	msgs, err := t.conn.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_GETTFILTER, Flags: netlink.Request | netlink.Dump}, Data: body})
	if err != nil {
		return nil, fmt.Errorf("listing flower filters on %s: %w", t.iface, err)
	}
	var out []filter
	for _, m := range msgs {
		f, ok, err := decodeFilter(m.Data)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, f)
		}
	}
	return out, nil
}

func (t *Table) Caps() tier.Caps {
	return tier.Caps{Backend: "tc-flower", Iface: t.iface, Capacity: t.cap, Counters: true, Flows: true, Forward: true}
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
	if len(t.rules) >= t.cap {
		return 0, fmt.Errorf("%w: %d of %d rules in use", tier.ErrTableFull, len(t.rules), t.cap)
	}
	if t.next > maxHandle {
		return 0, fmt.Errorf("%w: filter handles exhausted", tier.ErrTableFull)
	}
	lat, err := t.add(t.next, r)
	if err != nil {
		return 0, err
	}
	t.rules[r.Match] = t.next
	t.next++
	return lat, nil
}

func (t *Table) Remove(ctx context.Context, m tier.Match) (tier.Counters, time.Duration, error) {
	if err := m.Validate(); err != nil {
		return tier.Counters{}, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.rules[m]
	if !ok {
		return tier.Counters{}, 0, fmt.Errorf("%w: %s", tier.ErrNoRule, m)
	}
	// Read the counters last thing before removal: the NIC keeps none after.
	f, _ := t.get(h, family(m))
	start := time.Now()
	if err := t.del(h, family(m)); err != nil {
		return tier.Counters{}, 0, err
	}
	delete(t.rules, m)
	return f.counters, time.Since(start), nil
}

func (t *Table) List(ctx context.Context) ([]tier.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fs, err := t.dump()
	if err != nil {
		return nil, err
	}
	out := make([]tier.Entry, 0, len(fs))
	for _, f := range fs {
		out = append(out, tier.Entry{Rule: f.rule, Counters: f.counters, HasCounters: true})
	}
	return out, nil
}

func (t *Table) Close() error { return t.conn.Close() }

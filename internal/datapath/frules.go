// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/rule"
)

// Flow rules (bpf/lib/frule.h): rules by destination and packet shape, for
// floods whose sources cannot be listed. The operator's set is ordered,
// the first match decides, and it is replaced as a whole.
//
// Atomic replacement: the data plane reads the bank that the one-slot
// map-in-map tw_frules points at (tw_frules_a or tw_frules_b). SetFlowRules
// writes the whole new set into the other bank, then points tw_frules at
// it. The kernel returns from that update only after an RCU grace period,
// so from then on no program can still be reading the old bank, which
// becomes the spare that the next call may overwrite. A packet thus sees
// the old set or the new one, never a mix or a half-written rule, and the
// data plane takes no lock. (Snapshot's feature buffers work the same way.)
//
// Counter identity: a rule is its full match and action (rule.FlowRule is
// comparable). Each rule in a bank carries an id that indexes its per-CPU
// counters and token buckets. A rule that is in both the old and the new
// set keeps its id, so its counters and its bucket carry on wherever it
// moves in the order; a new rule gets an id that the old set does not use,
// zeroed before the swap, so it starts at zero and never counts what the
// old set's rules matched. There are twice as many ids as rules, so one is
// always free. The bank is all the state there is: FlowRules reads the rule
// set back from it, so a restarted daemon re-adopts both.

// The rule encodings of bpf/lib/consts.h that bpf2go cannot export (no
// map or struct is typed by those enums); the fixture tests check them.
const (
	frulesMax = len(filterTwFruleSet{}.Rule) // TW_FRULE_MAX
	frulesIDs = 2 * frulesMax                // TW_FRULE_IDS

	fruleDport  = 1 << 0 // TW_FRULE_F_DPORT
	fruleSport  = 1 << 1 // TW_FRULE_F_SPORT
	fruleLen    = 1 << 2 // TW_FRULE_F_LEN
	fruleBypass = 1 << 3 // TW_FRULE_F_BYPASS
)

// FlowRuleCapacity is how many flow rules the data plane holds.
const FlowRuleCapacity = frulesMax

// FlowRuleCounters is one flow rule's counters, summed over CPUs.
type FlowRuleCounters struct {
	Rule rule.FlowRule `json:"rule"`
	// Index is the rule's position in the set (the first match decides).
	Index int `json:"index"`
	// Matched is every packet the rule decided (frame bytes), including
	// those handed to the SYN proxy and those passed as known good.
	Matched Counter `json:"matched"`
	// Dropped is what the rule dropped: all it matched for a drop rule,
	// what was over the rate for a rate-limit rule.
	Dropped uint64 `json:"dropped_packets"`
	// PassedKnownGood is what passed because its source was known good.
	PassedKnownGood uint64 `json:"passed_known_good_packets"`
}

// encodeFlowRule is the data plane's form of a checked rule.
func encodeFlowRule(r *rule.FlowRule, id uint8) filterTwFrule {
	e := filterTwFrule{
		RatePps:  r.RatePPS,
		Action:   filterTwFruleAction(r.Action),
		Id:       id,
		Bits:     uint8(r.Dst.Bits()),
		Proto:    r.Proto,
		TcpMask:  r.TCPFlags.Mask,
		TcpValue: r.TCPFlags.Value,
		Frag:     uint8(r.Fragment),
	}
	// IPv4 as ::ffff:a.b.c.d, with the 96 bits of that prefix in the
	// mask: one comparison for IPv4 packets and IPv6 packets to mapped
	// destinations alike.
	a := r.Dst.Masked().Addr()
	bits := r.Dst.Bits()
	e.Family = 6
	if a.Is4() {
		e.Family = 4
		bits += 96
	}
	e.Dst = a.As16()
	for i := 0; i < bits; i++ {
		e.Mask[i/8] |= 0x80 >> (i % 8)
	}
	if !r.DstPorts.Any() {
		e.Flags |= fruleDport
		e.DportLo, e.DportHi = r.DstPorts.Lo, r.DstPorts.Hi
	}
	if !r.SrcPorts.Any() {
		e.Flags |= fruleSport
		e.SportLo, e.SportHi = r.SrcPorts.Lo, r.SrcPorts.Hi
	}
	if !r.Length.Any() {
		e.Flags |= fruleLen
		e.LenLo, e.LenHi = r.Length.Lo, r.Length.Hi
	}
	if r.KnownGoodBypass {
		e.Flags |= fruleBypass
	}
	return e
}

// decodeFlowRule is the rule a bank entry was encoded from.
func decodeFlowRule(e *filterTwFrule) rule.FlowRule {
	a := netip.AddrFrom16(e.Dst)
	if e.Family == 4 {
		a = a.Unmap()
	}
	r := rule.FlowRule{
		Dst:             netip.PrefixFrom(a, int(e.Bits)),
		Proto:           e.Proto,
		TCPFlags:        rule.TCPFlagMatch{Mask: e.TcpMask, Value: e.TcpValue},
		Fragment:        rule.FragmentMatch(e.Frag),
		Action:          rule.FlowAction(e.Action),
		RatePPS:         e.RatePps,
		KnownGoodBypass: e.Flags&fruleBypass != 0,
	}
	if e.Flags&fruleDport != 0 {
		r.DstPorts = rule.PortRange{Lo: e.DportLo, Hi: e.DportHi}
	}
	if e.Flags&fruleSport != 0 {
		r.SrcPorts = rule.PortRange{Lo: e.SportLo, Hi: e.SportHi}
	}
	if e.Flags&fruleLen != 0 {
		r.Length = rule.Range16{Lo: e.LenLo, Hi: e.LenHi}
	}
	return r
}

// fruleBanks returns the bank the data plane reads and the spare.
func (d *Datapath) fruleBanks() (active, spare *ebpf.Map, err error) {
	active, spare, err = Banks(d.maps.TwFrules, d.maps.TwFrulesA, d.maps.TwFrulesB)
	if err != nil {
		return nil, nil, fmt.Errorf("flow-rule banks: %w", err)
	}
	return active, spare, nil
}

// Banks returns, of two banks a and b that the one-slot map-in-map
// outer points at in turn, the one in force and the spare: the layout of
// every rule set swapped whole (the flow rules here, the NIC's policers).
func Banks(outer, a, b *ebpf.Map) (active, spare *ebpf.Map, err error) {
	var id ebpf.MapID
	if err := outer.Lookup(uint32(0), &id); err != nil {
		return nil, nil, fmt.Errorf("reading the bank in force: %w", err)
	}
	info, err := a.Info()
	if err != nil {
		return nil, nil, fmt.Errorf("inspecting a bank: %w", err)
	}
	if idA, _ := info.ID(); idA == id {
		return a, b, nil
	}
	return b, a, nil
}

// readBank returns a bank's rules, up to the first empty entry.
func readBank(m *ebpf.Map) ([]filterTwFrule, error) {
	var set filterTwFruleSet
	if err := m.Lookup(uint32(0), &set); err != nil {
		return nil, fmt.Errorf("reading flow-rule bank: %w", err)
	}
	for i := range set.Rule {
		if set.Rule[i].Action == filterTwFruleActionTW_FA_END {
			return set.Rule[:i], nil
		}
	}
	return set.Rule[:], nil
}

// SetFlowRules replaces the flow rules with rules, in order (the first
// match decides). Each is checked with rule.FlowRule.Check; more than
// FlowRuleCapacity is ErrTableFull and the same rule twice is ErrInvalid.
// All or nothing: on any error the data plane keeps the rules it had. A
// rule also in the current set keeps its counters and its rate-limit
// bucket; a new one starts at zero.
func (d *Datapath) SetFlowRules(rules []rule.FlowRule) error {
	seen := make(map[rule.FlowRule]int, len(rules))
	for i := range rules {
		if err := rules[i].Check(); err != nil {
			return fmt.Errorf("flow rule %d (%s): %w", i, rules[i], err)
		}
		if j, dup := seen[rules[i]]; dup {
			return fmt.Errorf("%w: flow rules %d and %d are the same (%s)", ErrInvalid, j, i, rules[i])
		}
		seen[rules[i]] = i
	}
	if len(rules) > frulesMax {
		return fmt.Errorf("%w: %d flow rules, the data plane holds %d", ErrTableFull, len(rules), frulesMax)
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()

	active, spare, err := d.fruleBanks()
	if err != nil {
		return err
	}
	cur, err := readBank(active)
	if err != nil {
		return err
	}
	// Plan ids: kept rules keep theirs, new ones take ids the active set
	// does not use (its counters are still being written).
	var used [frulesIDs]bool
	ids := make(map[rule.FlowRule]uint8, len(cur))
	for i := range cur {
		if int(cur[i].Id) < frulesIDs {
			ids[decodeFlowRule(&cur[i])] = cur[i].Id
			used[cur[i].Id] = true
		}
	}
	var bank filterTwFruleSet
	var fresh []uint8
	next := 0
	for i := range rules {
		id, kept := ids[rules[i]]
		if !kept {
			for used[next] {
				next++
			}
			id = uint8(next)
			used[next] = true
			fresh = append(fresh, id)
		}
		bank.Rule[i] = encodeFlowRule(&rules[i], id)
	}

	// Nothing the data plane reads changes before the swap: fresh ids and
	// the spare bank are unreferenced.
	if err := d.zeroFlowRuleIDs(fresh); err != nil {
		return err
	}
	if err := spare.Put(uint32(0), &bank); err != nil {
		return fmt.Errorf("writing flow-rule bank: %w", err)
	}
	cfg, err := d.config()
	if err != nil {
		return err
	}
	// frule_n only lets the data plane skip an empty bank: it must not be
	// 0 while rules are active, so it rises before the swap and falls
	// after it.
	n := uint32(len(rules))
	if n > 0 {
		if err := d.updateConfig(func(c *filterTwConfig) { c.FruleN = n }); err != nil {
			return err
		}
	}
	if err := d.maps.TwFrules.Put(uint32(0), spare); err != nil {
		if n > 0 {
			_ = d.updateConfig(func(c *filterTwConfig) { c.FruleN = cfg.FruleN }) // best effort undo
		}
		return fmt.Errorf("swapping flow-rule banks: %w", err)
	}
	if n == 0 {
		if err := d.updateConfig(func(c *filterTwConfig) { c.FruleN = 0 }); err != nil {
			return fmt.Errorf("flow rules removed, but the data plane still looks them up: %w", err)
		}
	}
	return nil
}

// zeroFlowRuleIDs zeroes the counters and token buckets of ids on every
// CPU (a zero bucket starts full).
func (d *Datapath) zeroFlowRuleIDs(ids []uint8) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]uint32, 0, len(ids)*int(d.sizes.ncpu))
	for cpu := uint32(0); cpu < d.sizes.ncpu; cpu++ {
		for _, id := range ids {
			keys = append(keys, cpu*uint32(frulesIDs)+uint32(id))
		}
	}
	if _, err := d.maps.TwFruleCtr.BatchUpdate(keys, make([]filterTwFctr, len(keys)), nil); err != nil {
		return fmt.Errorf("zeroing flow-rule counters: %w", err)
	}
	if _, err := d.maps.TwFruleTb.BatchUpdate(keys, make([]filterTwFbucket, len(keys)), nil); err != nil {
		return fmt.Errorf("zeroing flow-rule buckets: %w", err)
	}
	return nil
}

// FlowRules returns the flow rules the data plane applies, in order.
func (d *Datapath) FlowRules() ([]rule.FlowRule, error) {
	active, _, err := d.fruleBanks()
	if err != nil {
		return nil, err
	}
	bank, err := readBank(active)
	if err != nil {
		return nil, err
	}
	out := make([]rule.FlowRule, len(bank))
	for i := range bank {
		out[i] = decodeFlowRule(&bank[i])
	}
	return out, nil
}

// FlowRuleCounters returns every flow rule with its counters, in rule
// order. It holds the interface lock, so the counters are those of the
// rules it returns even while another process replaces the set.
func (d *Datapath) FlowRuleCounters() ([]FlowRuleCounters, error) {
	lk, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	active, _, err := d.fruleBanks()
	if err != nil {
		return nil, err
	}
	bank, err := readBank(active)
	if err != nil {
		return nil, err
	}
	if len(bank) == 0 {
		return nil, nil
	}
	ctrs, err := readArray[filterTwFctr](d.maps.TwFruleCtr)
	if err != nil {
		return nil, fmt.Errorf("reading flow-rule counters: %w", err)
	}
	out := make([]FlowRuleCounters, len(bank))
	for i := range bank {
		c := FlowRuleCounters{Rule: decodeFlowRule(&bank[i]), Index: i}
		for cpu := uint32(0); cpu < d.sizes.ncpu && int(bank[i].Id) < frulesIDs; cpu++ {
			v := &ctrs[cpu*uint32(frulesIDs)+uint32(bank[i].Id)]
			c.Matched.Packets += v.Packets
			c.Matched.Bytes += v.Bytes
			c.Dropped += v.Dropped
			c.PassedKnownGood += v.Good
		}
		out[i] = c
	}
	return out, nil
}

// SetSynproxy makes prog the SYN proxy that syn-cookie flow rules hand TCP
// packets to (a tail call: prog must be an XDP program compatible with
// the filter: type XDP, expected attach type XDP as SEC("xdp") gives, no
// frags, e.g. loaded by internal/synproxy/xdp), replacing any
// earlier one atomically; nil removes it. Without a proxy those packets
// pass, counted as synproxy_missing. The slot is pinned with the filter's
// state, so the proxy stays in place until it is replaced or detached.
func (d *Datapath) SetSynproxy(prog *ebpf.Program) error {
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	slot := filterTwJmpSlotTW_JMP_SYNPROXY
	if prog == nil {
		if err := d.maps.TwJmp.Delete(slot); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing SYN proxy: %w", err)
		}
		return nil
	}
	if err := d.maps.TwJmp.Put(slot, prog); err != nil {
		return fmt.Errorf("installing SYN proxy: %w", err)
	}
	return nil
}

// FlowRuleRecordSize is the size of a flow rule as the data plane stores
// it (struct tw_frule).
const FlowRuleRecordSize = 64

// MarshalFlowRule is a checked rule in the data plane's form, struct
// tw_frule with id 0: for the other programs that match flow rules with
// bpf/lib/fmatch.h (the emulated NIC's policers), so that both encode a
// rule one way.
func MarshalFlowRule(r rule.FlowRule) ([]byte, error) {
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("flow rule %s: %w", r, err)
	}
	e := encodeFlowRule(&r, 0)
	b, err := binary.Append(make([]byte, 0, FlowRuleRecordSize), binary.LittleEndian, &e)
	if err != nil {
		return nil, fmt.Errorf("encoding flow rule %s: %w", r, err)
	}
	if len(b) != FlowRuleRecordSize {
		return nil, fmt.Errorf("encoding flow rule %s: %d bytes, want %d", r, len(b), FlowRuleRecordSize)
	}
	return b, nil
}

// UnmarshalFlowRule is the rule b, as MarshalFlowRule wrote it.
func UnmarshalFlowRule(b []byte) (rule.FlowRule, error) {
	var e filterTwFrule
	if _, err := binary.Decode(b, binary.LittleEndian, &e); err != nil {
		return rule.FlowRule{}, fmt.Errorf("decoding flow rule: %w", err)
	}
	return decodeFlowRule(&e), nil
}

// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// The card's flow policers (bpf/lib/nic.h): flow rules for floods whose
// sources cannot be listed, dropped or held to a rate before the host's
// port, as tc flower's police action does on a real card. The set is
// replaced whole through two banks, as the filter's flow rules are
// (internal/datapath/frules.go): a packet meets the old set or the new
// one. A policer carries an id that indexes its per-CPU counters and
// bucket; one kept across a swap keeps its id, a new one takes an id the
// set in force does not use, zeroed before the swap.

const (
	polMax = len(nicTwNicPolSet{}.Rule) // TW_NIC_POL_MAX
	polIDs = 2 * polMax                 // TW_NIC_POL_IDS
)

// polPinned are the policers' maps: pinned beside the table's, and
// optional when a stage is re-adopted, since a stage pinned by an earlier
// tierwall has none (it then gets fresh ones).
var polPinned = []string{"tw_nic_pol", "tw_nic_pol_a", "tw_nic_pol_b", "tw_nic_pol_ctr", "tw_nic_pol_tb"}

func (n *Stage) polMaps() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{"tw_nic_pol": &n.objs.TwNicPol, "tw_nic_pol_a": &n.objs.TwNicPolA,
		"tw_nic_pol_b": &n.objs.TwNicPolB, "tw_nic_pol_ctr": &n.objs.TwNicPolCtr, "tw_nic_pol_tb": &n.objs.TwNicPolTb}
}

// loadPinnedPolicers returns the pinned policer maps in dir: all of
// them, or none when dir has none (a stage pinned before policers).
func loadPinnedPolicers(dir string) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	for _, name := range polPinned {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			for _, m := range out {
				m.Close()
			}
			return nil, fmt.Errorf("%w: loading pinned %s: %v", datapath.ErrIncompatible, name, err)
		}
		out[name] = m
	}
	if len(out) != 0 && len(out) != len(polPinned) {
		for _, m := range out {
			m.Close()
		}
		return nil, fmt.Errorf("%w: %d of the %d policer maps pinned in %s (detach the NIC stage to recreate)",
			datapath.ErrIncompatible, len(out), len(polPinned), dir)
	}
	return out, nil
}

// pinPolicers pins fresh policer maps into dir, the policers' bank set to
// the first: for a stage re-adopted from a tierwall that had none.
func (n *Stage) pinPolicers(dir string) error {
	if err := n.objs.TwNicPol.Put(uint32(0), n.objs.TwNicPolA); err != nil {
		return fmt.Errorf("setting the policers' bank: %w", err)
	}
	for name, m := range n.polMaps() {
		if err := (*m).Pin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pinning %s: %w", name, err)
		}
	}
	return nil
}

func (n *Stage) hasPolicers() bool { return n.objs.TwNicPol != nil }

// PolicerCapacity is how many policers the stage holds.
func (n *Stage) PolicerCapacity() int { return polMax }

// polBanks returns the bank the stage reads and the spare.
func (n *Stage) polBanks() (active, spare *ebpf.Map, err error) {
	active, spare, err = datapath.Banks(n.objs.TwNicPol, n.objs.TwNicPolA, n.objs.TwNicPolB)
	if err != nil {
		return nil, nil, fmt.Errorf("the policers' banks: %w", err)
	}
	return active, spare, nil
}

// readPolicers returns a bank's policers, up to the first empty entry,
// with the rules they encode.
func readPolicers(m *ebpf.Map) ([]nicTwFrule, []rule.FlowRule, error) {
	var set nicTwNicPolSet
	if err := m.Lookup(uint32(0), &set); err != nil {
		return nil, nil, fmt.Errorf("reading the policers: %w", err)
	}
	var rs []rule.FlowRule
	for i := range set.Rule {
		if set.Rule[i].Action == 0 { // TW_FA_END
			return set.Rule[:i], rs, nil
		}
		b, err := binary.Append(nil, binary.LittleEndian, &set.Rule[i])
		if err != nil {
			return nil, nil, fmt.Errorf("reading policer %d: %w", i, err)
		}
		r, err := datapath.UnmarshalFlowRule(b)
		if err != nil {
			return nil, nil, fmt.Errorf("reading policer %d: %w", i, err)
		}
		rs = append(rs, r)
	}
	return set.Rule[:], rs, nil
}

// checkPolicer refuses what a card cannot do without the host.
func checkPolicer(r rule.FlowRule) error {
	if err := r.Check(); err != nil {
		return err
	}
	if r.Action != rule.FlowDrop && r.Action != rule.FlowRateLimit {
		return fmt.Errorf("%w: policer %s: the card drops or rate-limits, it has no %s", tier.ErrInvalid, r, r.Action)
	}
	if r.KnownGoodBypass {
		return fmt.Errorf("%w: policer %s: the card knows no known-good sources", tier.ErrInvalid, r)
	}
	return nil
}

// SetPolicers replaces the policers with rs, in order (the first match
// decides); see tier.Policers. On an error the set in force stays.
func (n *Stage) SetPolicers(rs []rule.FlowRule) error {
	if !n.hasPolicers() {
		return fmt.Errorf("%w: this NIC stage was attached by a tierwall without policers (detach and attach it again)", tier.ErrUnsupported)
	}
	if len(rs) > polMax {
		return fmt.Errorf("%w: %d policers, the card holds %d", tier.ErrTableFull, len(rs), polMax)
	}
	seen := map[rule.FlowRule]bool{}
	enc := make([]nicTwFrule, len(rs))
	for i, r := range rs {
		if err := checkPolicer(r); err != nil {
			return err
		}
		if seen[r] {
			return fmt.Errorf("%w: policer %s twice", tier.ErrInvalid, r)
		}
		seen[r] = true
		b, err := datapath.MarshalFlowRule(r)
		if err != nil {
			return err
		}
		if _, err := binary.Decode(b, binary.LittleEndian, &enc[i]); err != nil {
			return fmt.Errorf("encoding policer %s: %w", r, err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	active, spare, err := n.polBanks()
	if err != nil {
		return err
	}
	cur, curRules, err := readPolicers(active)
	if err != nil {
		return err
	}
	var used [polIDs]bool
	ids := map[rule.FlowRule]uint8{}
	for i := range cur {
		if int(cur[i].Id) < polIDs {
			ids[curRules[i]] = cur[i].Id
			used[cur[i].Id] = true
		}
	}
	var set nicTwNicPolSet
	var fresh []uint32
	next := 0
	for i := range enc {
		id, kept := ids[rs[i]]
		if !kept {
			for used[next] {
				next++
			}
			id = uint8(next)
			used[next] = true
			fresh = append(fresh, uint32(id))
		}
		enc[i].Id = id
		set.Rule[i] = enc[i]
	}
	if err := n.zeroPolicers(fresh); err != nil {
		return err
	}
	if err := spare.Put(uint32(0), &set); err != nil {
		return fmt.Errorf("writing the policers: %w", err)
	}
	// pol_n only lets the stage skip an empty set: it rises before the
	// swap and falls after it, never 0 while policers are in force.
	count := uint32(len(rs))
	if count > 0 {
		if err := n.setPolN(count); err != nil {
			return err
		}
	}
	if err := n.objs.TwNicPol.Put(uint32(0), spare); err != nil {
		if count > 0 {
			_ = n.setPolN(uint32(len(cur))) // best effort undo
		}
		return fmt.Errorf("swapping the policers' banks: %w", err)
	}
	if count == 0 {
		if err := n.setPolN(0); err != nil {
			return fmt.Errorf("policers removed, but the stage still looks them up: %w", err)
		}
	}
	return nil
}

func (n *Stage) setPolN(v uint32) error {
	var cfg nicTwNicConfig
	if err := n.objs.TwNicCfg.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("reading NIC config: %w", err)
	}
	cfg.PolN = v
	if err := n.objs.TwNicCfg.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("writing NIC config: %w", err)
	}
	return nil
}

// zeroPolicers zeroes the counters and buckets of ids on every CPU (a
// zero bucket starts full).
func (n *Stage) zeroPolicers(ids []uint32) error {
	if len(ids) == 0 {
		return nil
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := n.objs.TwNicPolCtr.Put(id, make([]nicTwFctr, ncpu)); err != nil {
			return fmt.Errorf("zeroing policer counters: %w", err)
		}
		if err := n.objs.TwNicPolTb.Put(id, make([]nicTwFbucket, ncpu)); err != nil {
			return fmt.Errorf("zeroing policer buckets: %w", err)
		}
	}
	return nil
}

// PolicerCounters returns the policers in force, in order, with their
// counters summed over CPUs.
func (n *Stage) PolicerCounters() ([]tier.PolicerCounters, error) {
	if !n.hasPolicers() {
		return nil, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	active, _, err := n.polBanks()
	if err != nil {
		return nil, err
	}
	cur, rs, err := readPolicers(active)
	if err != nil {
		return nil, err
	}
	out := make([]tier.PolicerCounters, len(cur))
	for i := range cur {
		out[i].Rule = rs[i]
		var cs []nicTwFctr
		if err := n.objs.TwNicPolCtr.Lookup(uint32(cur[i].Id), &cs); err != nil {
			return nil, fmt.Errorf("reading policer counters: %w", err)
		}
		for _, c := range cs {
			out[i].Matched.Packets += c.Packets
			out[i].Matched.Bytes += c.Bytes
			out[i].Dropped += c.Dropped
		}
	}
	return out, nil
}

var _ tier.Policers = (*Table)(nil)

// PolicerCapacity is the stage's.
func (t *Table) PolicerCapacity() int { return t.nic.PolicerCapacity() }

// SetPolicers sets the stage's.
func (t *Table) SetPolicers(ctx context.Context, rs []rule.FlowRule) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.nic.SetPolicers(rs)
}

// PolicerCounters reads the stage's.
func (t *Table) PolicerCounters(ctx context.Context) ([]tier.PolicerCounters, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.nic.PolicerCounters()
}

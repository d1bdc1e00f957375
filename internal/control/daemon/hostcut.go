// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// The flow-rule rail: a flow rule matches by destination, and this host's
// own addresses are destinations like any other, so a rule can cut the
// host off from the sessions it is run through (its BGP sessions, which
// carry the fleet's rules and the routes upstream, and SSH) without
// banning anyone. Whoever asks, a peer or the operator, no rule that can
// match one packet of those sessions is enforced unless it lets them
// through (a rate limit large enough to carry them). "Can match" is an
// intersection, not a sample: a rule matches a session when each of its
// components' ranges meets what a packet of the session may carry (any TCP
// flags, any length from 40 to 65535, any ephemeral port on the far side),
// so no choice of flags, lengths or ports slips past it.

// MinSessionPPS is the smallest rate limit the rails take for one that
// lets sessions through: a limited session shares its bucket with
// whatever else the rule matches, and in a flood a few packets a second
// go to the flood. A smaller limit counts as a drop. A FlowSpec
// traffic-rate of 500 B/s is 1 pps at the default packet size: a drop.
const MinSessionPPS = 1000

// sessionLength is the IP length a session's packets may have: an IPv4
// and TCP header with no options, up to the largest packet.
var sessionLength = rule.Range16{Lo: 40, Hi: 65535}

// farEphemeral are the ports a peer or an SSH client may dial from: any
// above the well-known ones (their systems' ephemeral ranges differ).
var farEphemeral = rule.PortRange{Lo: 1024, Hi: 65535}

// localPorts reads the range this host dials from (net.ipv4.ip_local_port_range,
// which IPv6 shares): the port a BGP session we dialed arrives at. Tests
// replace it.
var localPorts = func() (rule.PortRange, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return rule.PortRange{}, fmt.Errorf("reading the local port range: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return rule.PortRange{}, fmt.Errorf("reading the local port range: %q", b)
	}
	lo, err1 := strconv.ParseUint(f[0], 10, 16)
	hi, err2 := strconv.ParseUint(f[1], 10, 16)
	if err1 != nil || err2 != nil || lo > hi || lo == 0 {
		return rule.PortRange{}, fmt.Errorf("reading the local port range: %q", b)
	}
	return rule.PortRange{Lo: uint16(lo), Hi: uint16(hi)}, nil
}

// hostSession is a kind of TCP packet that arrives at this host for one of
// the sessions it is managed or peers through.
type hostSession struct {
	what         string
	dst          netip.Addr
	sport, dport rule.PortRange
}

// isOwnAddr reports whether m is one of this host's addresses (not a
// gateway).
func isOwnAddr(m ban.Managed) bool { return strings.HasPrefix(m.What, "address of") }

// hostRail is the rail over this host's own sessions and addresses, as
// the daemon knows them now: its addresses and gateways (guard.go) and
// the configuration's neighbours, management ports and protected
// prefixes. It is a value built per use (Daemon.rail), so a reload or a
// new address is seen at the next check.
type hostRail struct {
	mgmt []ban.Managed
	cfg  *config.Config
}

// rail is the host rail as of now.
func (d *Daemon) rail() hostRail { return hostRail{mgmt: d.mgmt, cfg: d.cfg} }

// addrs are this host's own addresses, each with what it is.
func (h hostRail) addrs() []ban.Managed {
	var out []ban.Managed
	for _, m := range h.mgmt {
		if isOwnAddr(m) {
			out = append(out, m)
		}
	}
	return out
}

// hostSessions lists what this host's BGP and management sessions look
// like as they arrive: a session we dial comes back from the peer's port to
// one of our local ports; one the peer dials comes from its ephemeral port
// to our listening port.
func (h hostRail) sessions() []hostSession {
	local := rule.PortRange{Lo: 1024, Hi: 65535}
	if r, err := localPorts(); err == nil {
		local = r
	}
	var out []hostSession
	b := &h.cfg.BGP
	for _, n := range b.Neighbors {
		peer := n.AddressAddr
		if !peer.IsValid() {
			peer, _ = netip.ParseAddr(n.Address)
		}
		port := n.Port
		if port == 0 {
			port = 179
		}
		dsts := []netip.Addr{n.LocalAddressAddr}
		if !n.LocalAddressAddr.IsValid() {
			dsts = dsts[:0]
			for _, m := range h.addrs() {
				dsts = append(dsts, m.Addr)
			}
		}
		what := fmt.Sprintf("BGP session with %s", peer)
		for _, a := range dsts {
			if a.Is4() != peer.Unmap().Is4() && peer.IsValid() {
				continue
			}
			if !n.Passive {
				out = append(out, hostSession{what: what, dst: a, sport: rule.PortRange{Lo: port, Hi: port}, dport: local})
			}
			if b.ListenPort > 0 {
				lp := uint16(b.ListenPort)
				out = append(out, hostSession{what: what, dst: a, sport: farEphemeral, dport: rule.PortRange{Lo: lp, Hi: lp}})
			}
		}
	}
	for _, m := range h.addrs() {
		for _, p := range h.cfg.Rails.ManagementPorts {
			out = append(out, hostSession{what: fmt.Sprintf("management (TCP %d, rails.management_ports)", p), dst: m.Addr,
				sport: farEphemeral, dport: rule.PortRange{Lo: p, Hi: p}})
		}
	}
	return out
}

// meets reports whether a rule's port range m (zero: any) shares a port
// with r.
func meets(m, r rule.PortRange) bool {
	return m.Any() || m.Lo <= r.Hi && r.Lo <= m.Hi
}

// mayMatch reports whether fr can match some packet of s. Fragments are
// the one component that does not: TCP sets don't-fragment on its
// segments (path MTU discovery), so a session has none.
func mayMatch(fr rule.FlowRule, s hostSession) bool {
	if !fr.Dst.Contains(s.dst) {
		return false
	}
	if fr.Proto != 0 && fr.Proto != 6 {
		return false
	}
	if fr.Fragment == rule.FragAnyFrag || fr.Fragment == rule.FragLater {
		return false
	}
	if !meets(fr.SrcPorts, s.sport) || !meets(fr.DstPorts, s.dport) {
		return false
	}
	// TCP flags: a session sends SYN, ACK, PSH, FIN, RST in their
	// combinations, and a peer may set any other; a mask/value test
	// (Check keeps the value within the mask) matches some of them.
	if !fr.Length.Any() && (fr.Length.Hi < sessionLength.Lo || fr.Length.Lo > sessionLength.Hi) {
		return false
	}
	return true
}

// stops reports whether fr's action keeps a session's packets from the
// host: a drop, SYN cookies (an established session's segments carry no
// cookie), or a rate limit below MinSessionPPS.
func stops(fr rule.FlowRule) bool {
	switch fr.Action {
	case rule.FlowRateLimit:
		return fr.RatePPS < MinSessionPPS
	case rule.FlowDrop, rule.FlowSYNCookie:
		return true
	}
	return false
}

// cutsSessions says which of this host's BGP or management sessions fr
// would stop ("": none).
func (h hostRail) cutsSessions(fr rule.FlowRule) string {
	if !stops(fr) {
		return ""
	}
	for _, s := range h.sessions() {
		if mayMatch(fr, s) {
			return fmt.Sprintf("it can match this host's %s on %s (%s)", s.what, s.dst, actionText(fr))
		}
	}
	return ""
}

// hitsHost says which of this host's addresses fr would stop traffic to
// ("": none).
func (h hostRail) hitsHost(fr rule.FlowRule) string {
	if !stops(fr) {
		return ""
	}
	for _, m := range h.addrs() {
		if fr.Dst.Contains(m.Addr) {
			return fmt.Sprintf("it stops traffic to this host's %s %s (%s)", m.What, m.Addr, actionText(fr))
		}
	}
	return ""
}

func actionText(fr rule.FlowRule) string {
	if fr.Action == rule.FlowRateLimit {
		return fmt.Sprintf("a rate limit of %d pps is under the %d pps a session needs: a drop", fr.RatePPS, MinSessionPPS)
	}
	return fr.Action.String()
}

// cutsOff says why a peer's flow rule must not be enforced here ("": it
// may). A flow rule is about a destination, and our own addresses are the
// destinations it is meant for (drop UDP/53 to our resolver), so the
// source-ban rails do not apply; what must not happen is a peer cutting
// this host off: a rule that can stop the sessions that carry BGP or
// manage the host, or every packet to one of its addresses.
func (h hostRail) cutsOff(fr rule.FlowRule) string {
	if why := h.cutsSessions(fr); why != "" {
		return why
	}
	if !stops(fr) {
		return ""
	}
	for _, m := range h.mgmt {
		if fr.Dst.Contains(m.Addr) && fr.Proto == 0 && fr.DstPorts.Any() && fr.SrcPorts.Any() && fr.TCPFlags.Mask == 0 &&
			fr.Length.Any() && fr.Fragment == rule.FragAny {
			return fmt.Sprintf("it would drop every packet to %s (%s)", m.Addr, m.What)
		}
	}
	return ""
}

// checkOperatorFlowRule is the operator's flow-rule rail: a rule that
// stops traffic to this host's own addresses needs force, and none that
// can stop its BGP or management sessions is taken, forced or not (the
// operator would lose the host that could lift it).
func (h hostRail) checkOperatorFlowRule(fr rule.FlowRule, force bool) error {
	if why := h.cutsSessions(fr); why != "" {
		return fmt.Errorf("%w: flow rule %s: %s (never, not even by force)", apiv1.ErrBadRequest, fr, why)
	}
	if why := h.hitsHost(fr); why != "" && !force {
		return fmt.Errorf("%w: flow rule %s: %s; force to override", apiv1.ErrBadRequest, fr, why)
	}
	return nil
}

// The rules the daemon installs itself pass the same rail as a peer's and
// the operator's. The ladder answers a flood at a victim, and this host is
// a victim like any other: a TCP flood at it makes a rate limit on all TCP
// to it, which takes the host's SSH and BGP sessions into its bucket. A
// rule reloaded at start was checked against the sessions of the run that
// made it; the neighbors, the management ports or the host's addresses
// may have changed since.

// spareHostSessions takes out of this interval's decision the ladder's
// flow rules that can stop this host's BGP or management sessions
// (cutsSessions): each is logged and counted (rail "host_cutoff"), the
// rest of its mitigation goes ahead. Only cutsSessions, not hitsHost: a
// flow rule for this host's own services is what the ladder is for.
func (d *Daemon) spareHostSessions(now time.Time) {
	f, h := &d.flow, d.rail()
	for i := range f.dec.Apply {
		m := &f.dec.Apply[i]
		if m.Rung != detect.RungFlowRule {
			continue
		}
		var kept []rule.FlowRule // a new slice: the detector may hold m.Rules
		for _, r := range m.Rules {
			if why := h.cutsSessions(r); why != "" {
				d.event(now, "refused", netip.PrefixFrom(m.Victim, m.Victim.BitLen()), "ladder flow rule %s not installed: %s", r, why)
				d.Metrics.refuse(railHostCutoff, 1)
				continue
			}
			kept = append(kept, r)
		}
		m.Rules = kept
	}
}

// railHostCutoff is the refusals' rail label for a rule the daemon would
// have installed itself that cuts the host off.
const railHostCutoff = "host_cutoff"

// reloadedCutsOff says why a flow rule kept from the last run must not be
// enforced now ("": it may): a peer's as cutsOff, the ladder's and the
// operator's as cutsSessions (an operator's forced rule on one of this
// host's addresses stays: force was given for it).
func (h hostRail) reloadedCutsOff(r mitigate.Rule) string {
	if r.Origin == mitigate.Remote {
		return h.cutsOff(r.FlowRule)
	}
	return h.cutsSessions(r.FlowRule)
}

// oursDst reports whether a remote ban's destination is this host's: it
// holds one of its addresses or overlaps a protected prefix.
func (h hostRail) oursDst(dst netip.Prefix) bool {
	for _, m := range h.addrs() {
		if dst.Contains(m.Addr) {
			return true
		}
	}
	return slices.ContainsFunc(h.cfg.Rails.ProtectedPrefixes, dst.Overlaps)
}

// dropCuttingSavedRules removes from the flow rules kept beside the state
// file those that would cut this host off now, before openFlowRules gives
// them to the data plane: each dropped with a warning that names it, and
// the file rewritten without them. A file it cannot read is left for
// openFlowRules to report.
func (d *Daemon) dropCuttingSavedRules(now time.Time) error {
	capacity := d.cfg.Capacity.FlowRules
	if capacity == 0 {
		capacity = config.MaxFlowRules
	}
	path := FlowRulesFile(d.cfg.StateFile)
	set, warns, err := mitigate.Load(capacity, path)
	if err != nil {
		return nil //nolint:nilerr // openFlowRules reads the same file next and fails the start with it
	}
	dropped, h := 0, d.rail()
	for _, r := range set.Rules() {
		why := h.reloadedCutsOff(r)
		if why == "" {
			continue
		}
		if _, err := set.Remove(r.FlowRule); err != nil {
			continue
		}
		dropped++
		d.event(now, "refused", r.Dst, "flow rule %s (%s) kept in %s dropped: %s", r.FlowRule, r.Origin, path, why)
		d.Metrics.refuse(railHostCutoff, 1)
	}
	if dropped == 0 {
		return nil
	}
	// Rewritten, the file loses what Load dropped: say it here.
	for _, w := range warns {
		d.event(now, "restore", netip.Prefix{}, "%s", w)
	}
	if err := set.Save(now); err != nil {
		return fmt.Errorf("dropping flow rules that cut this host off: %w", err)
	}
	return nil
}

// dropCuttingRules withdraws the flow rules in force that would cut this
// host off under the running configuration: a reload can add management
// ports that a rule admitted before now stops. Each goes with an event
// that names it and a refusal count, and the set is pushed at once.
func (d *Daemon) dropCuttingRules(now time.Time) {
	f := &d.flow
	if f.set == nil {
		return
	}
	n, h := 0, d.rail()
	for _, r := range f.set.Rules() {
		why := h.reloadedCutsOff(r)
		if why == "" {
			continue
		}
		if _, err := f.set.Remove(r.FlowRule); err != nil {
			continue
		}
		n++
		d.event(now, "refused", r.Dst, "flow rule %s (%s) withdrawn: %s", r.FlowRule, r.Origin, why)
		d.Metrics.refuse(railHostCutoff, 1)
	}
	if n > 0 {
		f.dirty = true
		d.flow.pushFlowRules(now)
		d.publishFlows()
	}
}

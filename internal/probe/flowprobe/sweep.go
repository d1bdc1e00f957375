// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"fmt"
	"time"

	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

const (
	tcpFIN = 0x01
	tcpRST = 0x04
)

// tcpEnded reports whether software saw a TCP flow end: a RST, or a FIN
// from each side.
func tcpEnded(k tier.FlowKey, e *flow.Entry) bool { return tcpEndFlags(k, e.TCPFlags) }

// tcpEndFlags: a FIN from both sides, or an RST.
func tcpEndFlags(k tier.FlowKey, f [2]uint8) bool {
	if k.Proto != 6 {
		return false
	}
	return (f[0]|f[1])&tcpRST != 0 || (f[0]&tcpFIN != 0 && f[1]&tcpFIN != 0)
}

// endReason is a final record's reason. A TCP flow whose end one tier saw
// ended, even when another tier's timer noticed first: the FIN can pass
// in software while the NIC is still learning the flow, and the NIC then
// ages it out as idle.
func endReason(k tier.FlowKey, r EndReason, flags [2]uint8) EndReason {
	if r == EndIdle && tcpEndFlags(k, flags) {
		return EndOfFlow
	}
	return r
}

type sweepAction struct {
	k      tier.FlowKey
	final  bool
	reason EndReason
}

// sweep passes over the software table: it gives up DPI on flows that
// stopped short, ends flows that are idle or finished, and reports
// long-lived ones. Deletions wait until the walk is over.
func (p *Probe) sweep(now time.Time) error {
	var acts []sweepAction
	var giveup []tier.FlowKey
	p.sweeps++
	gen := p.sweeps
	visit := func(k tier.FlowKey, e *flow.Entry) {
		t := p.flows[k]
		if t != nil {
			t.seen = gen
		}
		switch {
		case t == nil && e.State == flow.StateSoftware:
			// Untracked (MaxFlows): only its end matters here.
		case t != nil && !t.endAt.IsZero():
			if now.Sub(t.endAt) >= p.cfg.EndGrace {
				acts = append(acts, sweepAction{k: k, final: true, reason: reasonOf(t.cause)})
			}
			return
		case t == nil || t.state == flow.StateDPI:
			// No sample arrived (the ring was full) or DPI is
			// waiting for packets that do not come.
			if now.Sub(e.First) >= p.cfg.DPITimeout {
				giveup = append(giveup, k)
			}
		case t.state == flow.StateLearning || t.state == flow.StateOffloaded:
			// The NIC ages it and says when it ends.
			return
		}
		switch {
		case tcpEnded(k, e) && now.Sub(e.Last) >= p.cfg.EndGrace:
			acts = append(acts, sweepAction{k: k, final: true, reason: EndOfFlow})
		case now.Sub(e.Last) >= p.cfg.IdleTimeout:
			acts = append(acts, sweepAction{k: k, final: true, reason: EndIdle})
		case t != nil && now.Sub(p.since(t, e)) >= p.cfg.ActiveTimeout:
			acts = append(acts, sweepAction{k: k, reason: EndActive})
		}
	}
	// With most flows in the NIC, a walk of the whole table reads
	// thousands of entries to find the few that software holds: the
	// sweep's main cost. Then those few are looked up one by one, and
	// the whole table is walked only every 8th sweep, for the entries
	// that no sample announced (a full ring) and for orphans.
	var held []tier.FlowKey
	if gen%8 != 0 {
		for k, t := range p.flows {
			if t.endAt.IsZero() && (t.state == flow.StateDPI || t.state == flow.StateSoftware) {
				held = append(held, k)
			}
		}
	}
	if gen%8 != 0 && len(held)*4 < p.walked {
		for _, k := range held {
			// A flow not found is left to the next walk's orphan
			// scan, which knows a missing entry from a racing one.
			if e, err := p.sw.Lookup(k); err == nil {
				visit(k, &e)
			}
		}
		return p.sweepApply(now, gen, acts, giveup)
	}
	flows := 0
	err := p.sw.Walk(func(k tier.FlowKey, e *flow.Entry) bool {
		flows++
		if e.State == flow.StateLearning || e.State == flow.StateOffloaded {
			// The NIC ages it and says when it ends. Most of a big
			// table is here: skip it before the map lookup, the
			// most of the sweep's cost per flow (perf at 100K flows).
			return true
		}
		visit(k, e)
		return true
	})
	if err != nil {
		return fmt.Errorf("sweeping software flows: %w", err)
	}
	p.walked = flows
	p.stats.SoftwareFlows = flows
	return p.sweepApply(now, gen, acts, giveup)
}

// sweepApply carries out what a sweep found, once its walk is over.
func (p *Probe) sweepApply(now time.Time, gen uint64, acts []sweepAction, giveup []tier.FlowKey) error {
	// Flows in DPI or software that the walk did not find twice running
	// have no software entry: a late sample made them after their end.
	// (Twice: one made during this walk may sit in a bucket the walk had
	// passed.) Flows the NIC ended wait in the ending queue.
	// The scan is a pass over every tracked flow: every 8th sweep is
	// enough to bound what orphans hold.
	var gone []tier.FlowKey
	if gen%8 == 0 {
		for k, t := range p.flows {
			if t.seen+1 < gen && t.id == 0 && (t.state == flow.StateDPI || t.state == flow.StateSoftware) {
				gone = append(gone, k)
			}
		}
	}
	for _, k := range gone {
		p.orphan(k, p.flows[k])
	}
	for _, k := range giveup {
		t := p.flows[k]
		if t == nil && len(p.flows) >= p.cfg.MaxFlows {
			p.untrack(k)
			continue
		}
		if t == nil {
			t = &tracked{state: flow.StateDPI, seen: gen}
			p.flows[k] = t
		}
		v := dpi.Verdict{App: dpi.AppUnknown}
		if d := p.dpi[k]; d != nil {
			v = d.f.Giveup()
			p.endDPI(k, d)
		}
		p.stats.DPIGiveups++
		p.decide(k, t, v)
	}
	for _, a := range acts {
		t := p.flows[a.k]
		if t == nil {
			t = &tracked{app: "unknown"}
		}
		if !a.final {
			p.exportActive(a.k, t, now)
			continue
		}
		if t.cause == 0 {
			t.cause = map[EndReason]tier.Cause{EndIdle: tier.CauseIdle, EndOfFlow: tier.CauseTCPTerm}[a.reason]
		}
		p.finish(a.k, t)
	}
	return nil
}

// since is when flow t was last reported, or began.
func (p *Probe) since(t *tracked, e *flow.Entry) time.Time {
	if !t.exported.IsZero() {
		return t.exported
	}
	return e.First
}

// exportActive reports what a live flow did since its last record.
func (p *Probe) exportActive(k tier.FlowKey, t *tracked, now time.Time) {
	e, err := p.sw.Lookup(k)
	var ep *flow.Entry
	if err == nil {
		ep = &e
	}
	t.exported = now
	p.emit(t.record(k, ep, EndActive, false))
}

// finish ends flow k: the probe lets go of it now, and its software entry
// is deleted with the next batch (flushOps), whose counters make its last
// record (finished).
func (p *Probe) finish(k tier.FlowKey, t *tracked) {
	if t.id != 0 {
		// Still in the NIC (a software end seen first): its
		// counters arrive with the unlearn, as an orphan record.
		if _, err := p.hw.Unlearn([]uint64{t.id}); err != nil {
			p.stats.UnlearnQueueFull++
		}
		delete(p.byID, t.id)
	}
	if d := p.dpi[k]; d != nil {
		p.endDPI(k, d)
	}
	delete(p.flows, k)
	reason := reasonOf(t.cause)
	if t.cause == tier.CauseApp || t.cause == tier.CauseFlush || t.cause == 0 {
		reason = EndForced
	}
	p.queue(pendingOp{op: flow.Op{Key: k, Delete: true}, t: t, reason: reason})
}

// finished reports the last record of a flow whose software entry the
// batch deleted (or found gone: then the NIC's counters alone make it).
func (p *Probe) finished(o *pendingOp, op *flow.Op) {
	var ep *flow.Entry
	if op.Err == nil {
		ep = &op.Entry
	}
	r := o.t.record(op.Key, ep, o.reason, true)
	r.Reason = endReason(op.Key, r.Reason, r.TCPFlags)
	p.emit(r)
}

func (p *Probe) emit(r Record) {
	p.stats.Records++
	p.stats.RecordsByReason[r.Reason]++
	p.view.add(&r)
	p.recent.add(&r)
	p.sink(r)
}

// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netns"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/datapath"
)

// Alerting: each interval, the detections and the victim detector's
// decision become observations for the attack tracker; its starts,
// escalations and ends go to the attack log and the notifier. While an
// attack runs the data plane samples the packets it drops, and each
// attack's share of them is its pcap.

// PacketSampler is the data plane's drop sampler (*datapath.Sampler).
type PacketSampler interface {
	SetEvery(every uint32) error
	Drain(max int) ([]datapath.Sample, error)
	Close() error
}

// samplerSource is a data plane that can sample its drops.
type samplerSource interface {
	Sampler() (*datapath.Sampler, error)
}

type alerting struct {
	cfg      config.Alerts
	tracker  alert.Tracker
	log      *alert.Log
	notify   *alert.Notifier
	sampler  PacketSampler // nil: no pcaps
	sampling bool
	netns    netns.NsHandle            // the loop's network namespace
	pkts     map[string][]alert.Packet // by attack ID, while it runs
	top      topScratch
	// net are network mode's attacks while they are on, by network
	// mode's ID (alertNetwork); only the loop touches them.
	net map[string]*netAlert
	// event is the daemon's, for what the sampler and the log refuse.
	event func(now time.Time, kind string, p netip.Prefix, format string, args ...any)
}

// openAlerts opens the attack log in the state file's directory, takes
// back attacks a previous run left open, starts the notifier and, when
// the data plane has one, the sampler (left off until an attack).
func (d *Daemon) openAlerts() error {
	c := d.cfg.Alerts
	lg, err := alert.OpenLog(filepath.Dir(d.cfg.StateFile), c.LogMaxBytes)
	if err != nil {
		return err
	}
	ns, err := netns.Get() // this thread's: the loop runs in the data plane's namespace
	if err != nil {
		return fmt.Errorf("finding the daemon's network namespace: %w", err)
	}
	a := &alerting{cfg: c, log: lg, pkts: map[string][]alert.Packet{}, netns: ns, tracker: alert.Tracker{EndAfter: c.EndAfter,
		GroupOf: func(v netip.Addr) string { return d.hostgroupOf(victimPrefix(v)) }}, net: map[string]*netAlert{}, event: d.event}
	a.notify = alert.NewNotifier(a.notifierConfig(), d.log)
	if rs, err := lg.List(); err == nil {
		for _, r := range rs {
			switch {
			case !r.Active():
			case isNetworkReport(r):
				// Network mode keeps no state across a restart: its
				// detector starts afresh and would name the attack again
				// under a new ID, and the host tracker would keep this
				// one open on its victim. It ends here, and says so.
				now := time.Now()
				r.Event, r.Ended, r.Updated = alert.EventEnd, now, now
				r.Duration = now.Sub(r.Started).Seconds()
				r.Reason = "ended by a restart of the daemon (network mode keeps no state across one); " + r.Reason
				if err := lg.Append(r); err != nil {
					d.log.Warn("attack log", "error", err)
				}
				a.notify.Notify(r)
			default:
				a.tracker.Restore(r)
			}
		}
	}
	if src, ok := d.dp.(samplerSource); ok {
		s, err := src.Sampler()
		if err != nil {
			d.log.Warn("attack reports will have no pcap", "error", err)
		} else {
			a.sampler = s
		}
	}
	d.alerts = a
	d.Metrics.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tierwall_alerts_dropped_total",
			Help: "Attack notifications dropped because the alert queue was full."}, func() float64 { return float64(d.alerts.notify.Dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tierwall_alerts_failed_total",
			Help: "Attack notifications a webhook or the exec hook did not take after every retry."}, func() float64 { return float64(d.alerts.notify.Failed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tierwall_alerts_sent_total",
			Help: "Attack notifications delivered (per webhook and hook)."}, func() float64 { return float64(d.alerts.notify.Sent.Load()) }))
	return nil
}

func (a *alerting) notifierConfig() alert.NotifierConfig {
	c := a.cfg
	return alert.NotifierConfig{Webhooks: c.Webhooks, Timeout: c.WebhookTimeout, Retries: c.Retries, Backoff: c.Backoff,
		Exec: c.Exec, ExecTimeout: c.ExecTimeout, Queue: c.Queue, Within: a.within}
}

// within runs f on a fresh thread in the daemon's network namespace:
// with -n only the loop's thread is in it, and the notifier's webhooks
// and hook must reach what the operator configured from there. The
// thread stays locked and dies with its goroutine, never to return to
// Go's pool in another namespace.
func (a *alerting) within(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(a.netns); err != nil {
			errc <- fmt.Errorf("entering the daemon's network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// close stops sampling and gives queued notifications a moment (nil:
// alerting never opened).
func (a *alerting) close() {
	if a == nil {
		return
	}
	if a.sampler != nil {
		_ = a.sampler.Close() // the program goes with the daemon's handles anyway
	}
	a.notify.Close(2 * time.Second)
	a.netns.Close()
}

// alertStep is the interval's alerting stage, after mitigate.
func (d *Daemon) alertStep(now time.Time, tr *detect.Traffic, ds []detect.Detection) {
	// Network mode reports its attacks through this stage, and takes a
	// reloaded configuration here: the interval's stages are daemon.go's,
	// and this is the one of network mode's.
	d.reloadTelemetry(now)
	a := d.alerts
	if a == nil {
		return
	}
	if !reflect.DeepEqual(a.cfg, d.cfg.Alerts) { // a reload changed them
		old := a.notify
		go old.Close(a.cfg.WebhookTimeout)
		a.cfg, a.tracker.EndAfter = d.cfg.Alerts, d.cfg.Alerts.EndAfter
		a.notify = alert.NewNotifier(a.notifierConfig(), d.log)
	}
	grew := a.takeSamples()
	reports := a.tracker.Observe(now, d.observations(tr, ds), d.stillMitigated)
	sent := map[string]bool{}
	for _, r := range reports {
		a.attachPcap(&r)
		sent[r.ID] = true
		if err := a.log.Append(r); err != nil {
			d.event(now, "error", netip.Prefix{}, "attack log: %v", err)
		}
		a.notify.Notify(r)
		d.event(now, "attack", victimPrefix(r.Victim), "%s %s: %v, rung %q, peak %.0f pps", r.ID, r.Event, r.Detectors, r.Rung, r.PeakPPS)
		if r.Event == alert.EventEnd {
			delete(a.pkts, r.ID)
		}
	}
	// An attack whose pcap grew is logged again, so the log and the API
	// count its packets before the next notification.
	for _, r := range a.tracker.Active() {
		if grew[r.ID] && !sent[r.ID] {
			a.attachPcap(r)
			if err := a.log.Append(*r); err != nil {
				d.event(now, "error", netip.Prefix{}, "attack log: %v", err)
			}
		}
	}
	a.setSampling(now)
}

func victimPrefix(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(a, a.BitLen())
}

// setSampling turns the sampler on while an attack still wants packets
// and off otherwise: a filter under no attack pays nothing for it.
func (a *alerting) setSampling(now time.Time) {
	if a.sampler == nil {
		return
	}
	want := false
	if a.cfg.SampleEvery > 0 && a.cfg.SamplePackets > 0 {
		for _, r := range a.tracker.Active() {
			if len(a.pkts[r.ID]) < a.cfg.SamplePackets {
				want = true
			}
		}
	}
	if want == a.sampling {
		return
	}
	every := uint32(0)
	if want {
		every = uint32(a.cfg.SampleEvery)
	}
	if err := a.sampler.SetEvery(every); err != nil {
		a.event(now, "error", netip.Prefix{}, "packet sampler: %v", err)
		return
	}
	a.sampling = want
}

// takeSamples drains the sampler and hands each packet to the attack on
// its destination (or to a victimless one); it returns the attacks whose
// pcap grew.
func (a *alerting) takeSamples() map[string]bool {
	grew := map[string]bool{}
	if a.sampler == nil || !a.sampling {
		return grew
	}
	// Twice the pcap's size at most: the ring holds what the last interval
	// dropped, and what is not read is overwritten by the next.
	ss, err := a.sampler.Drain(2 * a.cfg.SamplePackets)
	if err != nil {
		a.event(time.Now(), "error", netip.Prefix{}, "packet sampler: %v", err)
	}
	active := a.tracker.Active()
	byVictim := map[netip.Addr]*alert.Report{}
	for _, r := range active {
		byVictim[r.Victim] = r
	}
	for _, s := range ss {
		r := byVictim[frameDst(s.Data)]
		if r == nil {
			r = byVictim[netip.Addr{}]
		}
		if r == nil && len(active) == 1 {
			r = active[0]
		}
		if r == nil || len(a.pkts[r.ID]) >= a.cfg.SamplePackets {
			continue
		}
		a.pkts[r.ID] = append(a.pkts[r.ID], alert.Packet{Time: s.Time, Len: s.Len, Data: s.Data})
		grew[r.ID] = true
	}
	for id := range grew {
		if _, err := a.log.WritePackets(id, a.pkts[id]); err != nil {
			a.event(time.Now(), "error", netip.Prefix{}, "attack pcap: %v", err)
			delete(grew, id)
		}
	}
	return grew
}

// attachPcap names r's pcap in its report when it has packets.
func (a *alerting) attachPcap(r *alert.Report) {
	n := len(a.pkts[r.ID])
	if n == 0 {
		return
	}
	r.Packets = n
	r.Pcap, _ = a.log.PcapPath(r.ID) // the tracker's IDs are valid
}

// frameDst is the destination address of an Ethernet frame (through
// VLAN tags), or the zero address.
func frameDst(b []byte) netip.Addr {
	off := 12
	for range 3 {
		if len(b) < off+2 {
			return netip.Addr{}
		}
		switch binary.BigEndian.Uint16(b[off:]) {
		case 0x8100, 0x88a8:
			off += 4
			continue
		case 0x0800:
			if ip := b[off+2:]; len(ip) >= 20 {
				return netip.AddrFrom4([4]byte(ip[16:20]))
			}
		case 0x86dd:
			if ip := b[off+2:]; len(ip) >= 40 {
				return netip.AddrFrom16([16]byte(ip[24:40])).Unmap()
			}
		}
		return netip.Addr{}
	}
	return netip.Addr{}
}

// observations turns the interval's detections into the tracker's terms.
// The victim detector's judgements and mitigations name their victim;
// a per-source detection (rate, entropy, lists) is tied to the
// destination that source sent most to, when it is one address.
func (d *Daemon) observations(tr *detect.Traffic, ds []detect.Detection) []alert.Observation {
	var obs []alert.Observation
	dec := &d.flow.dec
	for _, j := range dec.Attacks {
		obs = append(obs, alert.Observation{Victim: j.Victim, Detector: "victim", PPS: j.Evidence.PPS, BPS: j.Evidence.BPS})
	}
	for _, m := range dec.Apply {
		o := alert.Observation{Victim: m.Victim, Detector: "victim", Rung: m.Rung.String(), Level: int(m.Rung),
			PPS: m.Evidence.PPS, BPS: m.Evidence.BPS, Reason: m.Reason}
		if m.Rung != detect.RungFlowRule {
			o.Bans = d.banned(m.Prefixes)
		}
		o.FlowRules = append(o.FlowRules, d.flow.rulesOf(m.ID)...)
		obs = append(obs, o)
	}
	var srcs []netip.Addr
	for _, det := range ds {
		if det.Detector != "victim" && det.Prefix.IsSingleIP() {
			srcs = append(srcs, det.Prefix.Addr())
		}
	}
	dst := topDest(tr, srcs)
	// The sources detected without a victim, each once (two detectors may
	// name the same one): their sum is that attack's rate.
	alone := map[netip.Prefix][2]float64{}
	for _, det := range ds {
		if det.Detector == "victim" {
			continue
		}
		o := alert.Observation{Victim: dst[det.Prefix.Addr()], Detector: det.Detector, Rung: detect.RungSourceBans.String(),
			Level: int(detect.RungSourceBans), PPS: det.Rate, Reason: det.Reason, Bans: d.banned([]netip.Prefix{det.Prefix})}
		if s := tr.Source(det.Prefix.Addr()); s != nil && det.Prefix.IsSingleIP() {
			o.BPS = 8 * tr.Rate(s.Bytes)
			o.Sources = []alert.Source{{Addr: det.Prefix.Addr(), PPS: tr.Rate(s.Packets)}}
		}
		if len(o.Bans) == 0 {
			o.Rung, o.Level = "", 0 // detected, not acted on (rails, monitor-only)
		}
		if !o.Victim.IsValid() {
			r := alone[det.Prefix]
			alone[det.Prefix] = [2]float64{max(r[0], o.PPS), max(r[1], o.BPS)}
		}
		obs = append(obs, o)
	}
	victims := map[netip.Addr]bool{}
	for _, o := range obs {
		if o.Victim.IsValid() {
			victims[o.Victim] = true
		}
	}
	// An observation's rate is the attack's, the tracker's peak being the
	// largest: all the victim received in the interval, not the rate of
	// the one source a per-source detection names (a 31.5 kpps flood from
	// 30 sources was reported as its largest source's 1081 pps).
	rates := map[netip.Addr][2]float64{}
	for i := range tr.Dests {
		if a := tr.DestAddr(i); victims[a] {
			rates[a] = [2]float64{tr.Rate(tr.Dests[i].Packets), 8 * tr.Rate(tr.Dests[i].Bytes)}
		}
	}
	var sum [2]float64
	for _, r := range alone {
		sum[0], sum[1] = sum[0]+r[0], sum[1]+r[1]
	}
	for i := range obs {
		r, ok := rates[obs[i].Victim]
		if !obs[i].Victim.IsValid() {
			r, ok = sum, true
		}
		if ok {
			obs[i].PPS, obs[i].BPS = max(obs[i].PPS, r[0]), max(obs[i].BPS, r[1])
		}
	}
	top := d.alerts.top.topSources(tr, victims, 10)
	for i := range obs {
		obs[i].Sources = append(obs[i].Sources, top[obs[i].Victim]...)
	}
	return obs
}

// banned keeps the prefixes the ban store holds (the rails may have
// refused some).
func (d *Daemon) banned(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if _, ok := d.store.Get(p); ok {
			out = append(out, p)
		}
	}
	return out
}

// rulesOf lists the flow rules the ladder put in for mitigation id.
func (f *flowStage) rulesOf(id uint64) []string {
	if f.set == nil {
		return nil
	}
	var out []string
	for _, r := range f.set.Rules() {
		if r.Origin == mitigate.Ladder && r.Mitigation == id {
			out = append(out, r.FlowRule.String())
		}
	}
	return out
}

// stillMitigated: an attack is not over while one of its bans stands or
// the ladder still has a mitigation or a flow rule for its victim.
func (d *Daemon) stillMitigated(r *alert.Report, bans map[netip.Prefix]struct{}) bool {
	for p := range bans {
		if _, ok := d.store.Get(p); ok {
			return true
		}
	}
	if !r.Victim.IsValid() {
		return false
	}
	if v := d.flow.victims; v != nil && slices.ContainsFunc(v.Active(), func(m detect.Mitigation) bool { return m.Victim == r.Victim }) {
		return true
	}
	if d.flow.set != nil && slices.ContainsFunc(d.flow.set.Rules(), func(m mitigate.Rule) bool {
		return m.Origin == mitigate.Ladder && m.Victim == r.Victim
	}) {
		return true
	}
	return false
}

// topDest maps each source to the destination it sent most packets to.
func topDest(tr *detect.Traffic, srcs []netip.Addr) map[netip.Addr]netip.Addr {
	out := map[netip.Addr]netip.Addr{}
	if len(srcs) == 0 {
		return out
	}
	want := map[int32]netip.Addr{}
	for _, a := range srcs {
		if i := tr.SourceIndex(detect.KeyOf(a.Unmap())); i >= 0 {
			want[int32(i)] = a
		}
	}
	best := map[int32]uint64{}
	for _, p := range tr.Pairs {
		a, ok := want[p.Src]
		if !ok || p.Packets <= best[p.Src] {
			continue
		}
		best[p.Src] = p.Packets
		out[a] = tr.DestAddr(int(p.Dst))
	}
	return out
}

// maxTopVictims bounds the victims that get a top-sources list in one
// interval: each costs a pass over the interval's pairs, and an attack on
// more victims than this at once is reported without the list for the
// rest (their detections, bans and rates are reported all the same).
const maxTopVictims = 32

// topScratch is topSources' scratch, kept across intervals like the
// daemon's detect.Traffic: packets per source, indexed like tr.Sources,
// all zero between calls.
type topScratch struct {
	sum []uint32
}

// topSources ranks, per victim, the n sources that sent it most packets
// this interval. For each victim one pass over the pairs sums its packets
// per source into the dense scratch (a pair appears once per protocol),
// and one pass over the scratch keeps the n largest and zeroes it again.
// A flood from a million sources costs one 4 MB slice kept from interval
// to interval, where a map and a sort of a million entries per victim
// took 40% of a 1M-source interval and most of its garbage
// (tierwall-bench, daemon interval at 1M distinct sources: 780 ms and
// 379 MB peak RSS with them, the targets being 1 s and 256 MB). A sum
// saturates at 2^32-1 packets, four billion from one source to one
// victim in one interval, where the ranking no longer matters.
func (t *topScratch) topSources(tr *detect.Traffic, victims map[netip.Addr]bool, n int) map[netip.Addr][]alert.Source {
	out := map[netip.Addr][]alert.Source{}
	if len(victims) == 0 || n <= 0 {
		return out
	}
	idx := map[int32]netip.Addr{}
	for i := range tr.Dests {
		if a := tr.DestAddr(i); victims[a] && len(idx) < maxTopVictims {
			idx[int32(i)] = a
		}
	}
	if len(idx) == 0 {
		return out
	}
	if len(t.sum) < len(tr.Sources) {
		t.sum = make([]uint32, len(tr.Sources))
	}
	sum := t.sum[:len(tr.Sources)]
	for d, v := range idx {
		for _, p := range tr.Pairs {
			if p.Dst == d {
				sum[p.Src] = uint32(min(uint64(sum[p.Src])+p.Packets, math.MaxUint32))
			}
		}
		best := make([]alert.Source, 0, n)
		counts := make([]uint32, 0, n)
		for s, c := range sum {
			if c == 0 {
				continue
			}
			sum[s] = 0
			// Keep best sorted by packets, most first, addresses
			// ascending among equals: insert s where it belongs
			// when it beats the last kept.
			a := tr.SourceAddr(s)
			if len(best) == n && !topBefore(c, a, counts[n-1], best[n-1].Addr) {
				continue
			}
			at := len(best)
			for at > 0 && topBefore(c, a, counts[at-1], best[at-1].Addr) {
				at--
			}
			if len(best) < n {
				best = append(best, alert.Source{})
				counts = append(counts, 0)
			}
			copy(best[at+1:], best[at:len(best)-1])
			copy(counts[at+1:], counts[at:len(counts)-1])
			best[at], counts[at] = alert.Source{Addr: a, PPS: tr.Rate(uint64(c))}, c
		}
		if len(best) > 0 {
			out[v] = best
		}
	}
	return out
}

// topBefore orders top sources: more packets first, then the lower
// address.
func topBefore(c uint32, a netip.Addr, c2 uint32, a2 netip.Addr) bool {
	if c != c2 {
		return c > c2
	}
	return a.Compare(a2) < 0
}

// Attacks lists the attack log, with the running attacks as they stand.
func (d *Daemon) Attacks(ctx context.Context) ([]alert.Report, error) {
	a := d.alerts
	if a == nil {
		return []alert.Report{}, nil
	}
	rs, err := a.log.List()
	if err != nil {
		return nil, err
	}
	var live []alert.Report
	if err := d.Do(ctx, func() {
		for _, r := range a.tracker.Active() {
			live = append(live, *r)
		}
	}); err != nil {
		return nil, err
	}
	for _, l := range live {
		if i := slices.IndexFunc(rs, func(r alert.Report) bool { return r.ID == l.ID }); i >= 0 {
			rs[i] = l
		} else {
			rs = append(rs, l)
		}
	}
	for i := range rs {
		rs[i] = rs[i].Rounded()
	}
	return rs, nil
}

// Attack is one attack's latest report.
func (d *Daemon) Attack(ctx context.Context, id string) (alert.Report, error) {
	rs, err := d.Attacks(ctx)
	if err != nil {
		return alert.Report{}, err
	}
	for _, r := range rs {
		if r.ID == id {
			return r, nil
		}
	}
	return alert.Report{}, fmt.Errorf("%w: no attack %q", apiv1.ErrNotFound, id)
}

// AttackPcap is the path of an attack's pcap.
func (d *Daemon) AttackPcap(ctx context.Context, id string) (string, error) {
	r, err := d.Attack(ctx, id)
	if err != nil {
		return "", err
	}
	if r.Pcap == "" {
		return "", fmt.Errorf("%w: attack %s has no sampled packets", apiv1.ErrNotFound, id)
	}
	p, err := d.alerts.log.PcapPath(id)
	if errors.Is(err, alert.ErrNoAttack) {
		return "", fmt.Errorf("%w: %v", apiv1.ErrNotFound, err)
	}
	return p, err
}

// Network mode's attacks (telemetry.go) go through the same alert path
// as host mode's: a report of the same shape in the attack log, to the
// webhooks and the exec hook, and an "attack" event. Its detector, not
// the host tracker, says when an attack starts and ends, so the reports
// are made here: start when the feed names the attack (with what was
// announced for it in the same tick), escalation when an upstream action
// is announced or withdrawn while it is on, end when the feed shows it
// over (listing what was withdrawn). A report says:
//   - detectors: "network:KIND" for each kind over its threshold;
//   - victim: the attacked address (absent for a carpet bombing, whose
//     prefixes are in reason);
//   - reason: network mode's ID, the victim, the host group, the kinds,
//     the rates at detection, then what was announced or withdrawn;
//   - rung: "flowspec" or "rtbh", the highest upstream action announced;
//   - flow_rules: the upstream actions announced, "flowspec RULE" and
//     "rtbh PREFIX [communities ...]";
//   - peak_pps, peak_bps: the feed's, scaled by sampling.
// In dry-run and monitor modes (or without BGP) nothing is announced:
// the reports have no rung and say in reason what would be.

// netAlert is a network attack's report while it is on, and the upstream
// actions (announced, or in dry-run planned) its last report listed.
type netAlert struct {
	r  alert.Report
	up []string
	// about is the reason's first part, what the feed named at the
	// start; each report adds what changed upstream to it.
	about string
}

// netDetector prefixes the detectors of a network attack's report.
const netDetector = "network:"

func isNetworkReport(r alert.Report) bool {
	return slices.ContainsFunc(r.Detectors, func(d string) bool { return strings.HasPrefix(d, netDetector) })
}

// netReportID names a network attack's report as the tracker names host
// mode's, by its start, so that the log sorts by time, with network
// mode's ID after it: that ID restarts from 1 with the daemon and would
// otherwise overwrite an earlier run's attack in the log. It is kept to
// the characters the log takes for a file name.
func netReportID(a telemetry.Attack) string {
	id := []byte(a.Detected.UTC().Format("20060102T150405.000Z") + "-" + a.ID)
	for i, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-') {
			id[i] = '.'
		}
	}
	return string(id[:min(len(id), 64)])
}

// upstreamKey is how an upstream action reads in a report.
func upstreamKey(u telemetry.Upstream) string {
	s := string(u.Kind) + " " + upstreamText(u)
	if cs := slices.Concat(u.Communities.Standard, u.Communities.Large); len(cs) > 0 {
		s += " communities " + strings.Join(cs, ",")
	}
	return s
}

// alertNetwork turns one tick of network mode into reports. announcing
// says whether the plan's routes go upstream (enforce, BGP on, not
// rails.monitor_only); failed that announcing them failed this tick, when
// what is upstream is unknown and the reports keep what they said. It
// runs on the loop (network mode reports through Do), as alertStep does.
func (d *Daemon) alertNetwork(c telemetry.Change, announcing, failed bool, mode telemetry.Mode) {
	a := d.alerts
	if a == nil {
		return
	}
	send := func(n *netAlert) {
		r := &n.r
		r.Updated = c.Now
		r.Duration = max(c.Now.Sub(r.Started), 0).Seconds()
		if err := a.log.Append(*r); err != nil {
			d.event(c.Now, "error", netip.Prefix{}, "attack log: %v", err)
		}
		a.notify.Notify(*r)
		d.event(c.Now, "attack", victimPrefix(r.Victim), "%s %s: %v, rung %q, peak %.0f pps", r.ID, r.Event, r.Detectors, r.Rung, r.PeakPPS)
	}
	// describe names what changed upstream since n's last report.
	describe := func(n *netAlert, now []string) string {
		var added, gone []string
		for _, s := range now {
			if !slices.Contains(n.up, s) {
				added = append(added, s)
			}
		}
		for _, s := range n.up {
			if !slices.Contains(now, s) {
				gone = append(gone, s)
			}
		}
		var parts []string
		switch {
		case !announcing && len(added) > 0:
			parts = append(parts, fmt.Sprintf("would announce (%s, or no BGP): %s", mode, strings.Join(added, "; ")))
		case len(added) > 0:
			parts = append(parts, "announced upstream: "+strings.Join(added, "; "))
		}
		if announcing && len(gone) > 0 {
			parts = append(parts, "withdrawn upstream: "+strings.Join(gone, "; "))
		}
		return strings.Join(parts, "; ")
	}
	plan := map[string][]string{}
	rung := map[string]string{}
	for _, u := range c.Plan {
		plan[u.Attack] = append(plan[u.Attack], upstreamKey(u))
		if u.Kind == telemetry.UpRTBH || rung[u.Attack] == "" {
			rung[u.Attack] = string(u.Kind)
		}
	}
	started := map[string]bool{}
	for _, at := range c.Started {
		var ds []string
		for _, k := range at.Kinds {
			ds = append(ds, netDetector+k.String())
		}
		var victim netip.Addr
		if !at.Carpet && len(at.Dst) == 1 && at.Dst[0].IsSingleIP() {
			victim = at.Dst[0].Addr()
		}
		var dsts []string
		for _, p := range at.Dst {
			dsts = append(dsts, p.String())
		}
		what := "network attack"
		if at.Carpet {
			what = "network attack on the group's total (carpet bombing)"
		}
		if at.Monitor {
			what += ", the group's action is monitor"
		}
		a.net[at.ID] = &netAlert{r: alert.Report{ID: netReportID(at), Event: alert.EventStart, Victim: victim, Group: at.Group, Started: at.Detected,
			Detectors: ds, TopSources: []alert.Source{}, Bans: []netip.Prefix{}, FlowRules: []string{},
			PeakPPS: at.PeakPPS, PeakBPS: at.PeakBPS},
			about: fmt.Sprintf("%s %s on %s (host group %s): %s; %.0f pps, %.0f bit/s, %.0f flows/s at detection, %s after its first record",
				what, at.ID, strings.Join(dsts, ","), dash(at.Group), kindNames(at.Kinds), at.PPS, at.BPS, at.FlowsPS,
				at.Detected.Sub(at.FirstRecord).Round(time.Millisecond))}
		a.net[at.ID].r.Reason = a.net[at.ID].about
		started[at.ID] = true
	}
	ended := map[string]telemetry.Attack{}
	for _, at := range c.Ended {
		ended[at.ID] = at
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range a.net {
			if !yield(id) {
				return
			}
		}
	}) {
		n := a.net[id]
		base := n.about
		if at, over := ended[id]; over {
			n.r.Event, n.r.Ended = alert.EventEnd, at.Ended
			if n.r.Ended.IsZero() {
				n.r.Ended = c.Now
			}
			n.r.PeakPPS, n.r.PeakBPS = max(n.r.PeakPPS, at.PeakPPS), max(n.r.PeakBPS, at.PeakBPS)
			n.r.Reason = base + "; over"
			if announcing && !failed && len(n.up) > 0 {
				n.r.Reason += "; upstream: withdrawn " + strings.Join(n.up, "; ")
			}
			send(n)
			delete(a.net, id)
			continue
		}
		if failed || !c.PlanChanged && !started[id] {
			continue
		}
		now := plan[id]
		change := describe(n, now)
		if !started[id] && change == "" {
			continue
		}
		if !started[id] {
			n.r.Event = alert.EventEscalation
		}
		if change != "" {
			base += "; upstream: " + change
		}
		n.r.Reason = base
		if announcing {
			// The rung is the highest action taken, as host mode's.
			if r := rung[id]; r == string(telemetry.UpRTBH) || n.r.Rung == "" {
				n.r.Rung = r
			}
			n.r.FlowRules = append([]string{}, now...)
		}
		n.up = now
		send(n)
	}
}

// kindNames lists an attack's kinds for a reason.
func kindNames(ks []telemetry.Kind) string {
	var s []string
	for _, k := range ks {
		s = append(s, k.String())
	}
	return strings.Join(s, ",")
}

// dash is a name or "-" for none.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

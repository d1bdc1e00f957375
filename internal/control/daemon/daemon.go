// SPDX-License-Identifier: Apache-2.0

// Package daemon is `tierwall run`: the control loop that closes the
// paper's pipeline. Every interval it takes the feature snapshot, runs the
// detectors, turns detections into bans through the safety rails, blocks
// them in XDP, lets the rate monitor lift bans on sources gone quiet, runs
// placement over the hardware tier, and saves its state. One goroutine
// owns all of that; API requests run on it between intervals, so nothing
// needs a lock and nothing the API sees is half-applied.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/kernel"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/sdnotify"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/autodetect"
	"github.com/tierwall/tierwall/internal/tier/flower"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
	"github.com/tierwall/tierwall/internal/tier/ntuple"
)

// Daemon is the running control loop.
type Daemon struct {
	cfg     *config.Config
	cfgPath string
	log     *slog.Logger
	clock   stageClock // the current interval's stages (stages.go)

	hostgroups *detect.HostGroups

	// kernelFeatures: what the kernel had at start (checkKernel).
	kernelFeatures []kernel.Feature

	dp    DataPlane
	card  cardTier // the NIC's table and placement over it (card.go)
	store *ban.Store

	det detectorSet // the per-source detectors (detectors.go)

	lastSnap   time.Time
	lastAt     time.Time
	src        sourceHistory      // the circuit breaker's view of the sources (history.go)
	obs        observer           // the interval's traffic from the feature snapshot (observe.go)
	readings   []datapath.Reading // the bans' counters, parallel to store.Prefixes(), reused
	breaker    bool
	tierCounts map[string]int // bans per tier, for the metrics collector (under mu)
	started    time.Time
	lastSave   time.Time
	steps      uint64
	dirty      bool
	flow       flowStage
	heavy      heavyStage      // the XDP heavy-hitter detector (heavy.go)
	bgp        bgpStage        // the BGP speaker (bgp.go)
	tele       telemetryState  // network mode (telemetry.go)
	flowView   []mitigate.Rule // the flow rules with counters, for the API and metrics (under mu)

	owner  *Ownership    // the data plane's owner lock, released at shutdown
	mgmt   []ban.Managed // this host's addresses and gateways: never banned (guard.go)
	mgmtAt time.Time
	alerts *alerting // attack tracking, log and notifications (alerts.go)

	*journal // events and detections, for the API (journal.go)

	Metrics *Metrics
	reqs    chan func()
	mu      sync.Mutex // guards only what the metrics collector reads outside the loop
}

// DataPlane is the XDP filter as the control loop uses it:
// *datapath.Datapath in production, a fake in unit tests.
type DataPlane interface {
	// Drain ends the interval: the feature buffers' flows go to sink
	// (datapath.Datapath.Drain).
	Drain(sink datapath.FlowSink) (*datapath.Snapshot, error)
	Block(ps ...netip.Prefix) error
	Unblock(ps ...netip.Prefix) error
	Allow(ps ...netip.Prefix) error
	Disallow(ps ...netip.Prefix) error
	Blocked() ([]datapath.Rule, error)
	Allowed() ([]datapath.Rule, error)
	// RuleCountersInto reads the counters of block rules ps into out,
	// out[i] for ps[i]: a slice, not a map, since it runs over every ban
	// every interval.
	RuleCountersInto(ps []netip.Prefix, out []datapath.Reading) error
	Stats() (*datapath.Stats, error)
	// Check reports datapath.ErrOrphaned when the filter no longer reads
	// these maps (detached, re-attached, interface re-created).
	Check() error
	Close() error
}

var _ DataPlane = (*datapath.Datapath)(nil)

// New attaches (or re-adopts) the data plane and the hardware tier named
// in cfg, loads the state file and reconciles the three. It must run on
// the goroutine that will run Run, locked to its OS thread, in the network
// namespace of cfg.Interface.
func New(cfg *config.Config, cfgPath string, log *slog.Logger) (_ *Daemon, err error) {
	// One daemon per data plane: refused here, before the program, the
	// maps or the state file are touched.
	own, err := Own(ownerDir, ownerKey(cfg), Owner{Interface: cfg.Interface, Socket: cfg.API.Socket,
		TCP: cfg.API.TCP, Config: cfgPath, StateFile: cfg.StateFile})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			own.Release()
		}
	}()
	// The budget is checked before anything is attached: a budget the
	// tables alone exceed is a configuration error that changes nothing.
	if err := applyMemoryBudget(cfg, log); err != nil {
		return nil, err
	}
	// A loop that cannot get the CPU still works, later: said, not fatal.
	if err := setNice(cfg.NiceOrDefault(), log); err != nil {
		log.Warn("running at the niceness started with", "err", err)
	}
	dp, err := openDataPlane(cfg, log) // role network: none (network.go)
	if err != nil {
		return nil, fmt.Errorf("attaching to %s: %w", cfg.Interface, err)
	}
	hw, err := openHardware(cfg, log)
	if err != nil {
		dp.Close()
		return nil, err
	}
	d, err := newDaemon(cfg, cfgPath, log, dp, hw, time.Now())
	if err != nil {
		if hw != nil {
			hw.Close()
		}
		dp.Close()
		return nil, err
	}
	d.owner = own
	if cfg.Role != config.RoleNetwork { // it loads no BPF: nothing to check
		d.checkKernel(log)
	}
	return d, nil
}

// ownerDir and attachDataPlane are the run directory and datapath.Attach;
// tests start daemons over a fake data plane in a temporary directory.
var (
	ownerDir        = bpffs.RunDir
	attachDataPlane = func(cfg *config.Config, log *slog.Logger) (DataPlane, error) {
		dp, err := datapath.Attach(cfg.Interface, dataPlaneOptions(cfg))
		if err != nil {
			return nil, err
		}
		for _, w := range dp.Warnings {
			log.Warn(w)
		}
		return dp, nil
	}
)

// NewOver builds the loop over a data plane the caller loaded (no
// hardware tier, no configuration file to reload): for benchmarks that
// drive Step themselves.
func NewOver(cfg *config.Config, log *slog.Logger, dp DataPlane, now time.Time) (*Daemon, error) {
	return newDaemon(cfg, "", log, dp, nil, now)
}

// newDaemon builds the loop over a data plane and an optional hardware
// tier (nil: XDP only) and reconciles them with the state file at now.
func newDaemon(cfg *config.Config, cfgPath string, log *slog.Logger, dp DataPlane, hw tier.Table, now time.Time) (*Daemon, error) {
	d := &Daemon{cfg: cfg, cfgPath: cfgPath, log: log, reqs: make(chan func()), started: now, dp: dp, journal: &journal{},
		src: newSourceHistory()}
	d.Metrics = newMetrics(d)
	if hw != nil { // before the flow stage, which polices on the card
		d.card = newCardTier(cfg, hw, d.Metrics.countHW(hw))
	}
	d.heavy = d.newHeavyStage()
	d.bgp = d.newBGPStage()
	d.flow = d.newFlowStage()
	d.det = newDetectorSet(cfg)
	d.store = ban.NewStore(rails(cfg), cfg.Bans.TTL)
	d.store.RefreshEvery = refreshEvery
	d.store.PrefixLift = prefixLift
	// The host's addresses before the flow rules: a kept rule that would
	// cut the host off is dropped before the data plane gets it.
	d.refreshManagement(now)
	if err := d.dropCuttingSavedRules(now); err != nil {
		return nil, err
	}
	if err := d.openFlowRules(now); err != nil {
		return nil, err
	}
	d.wireHostGroups()
	if err := d.heavy.open(d.dp, d.protected()); err != nil {
		return nil, err
	}
	if err := d.reconcile(now); err != nil {
		return nil, err
	}
	d.det.restore(d.store.Baselines)
	if snap, n, err := d.obs.discard(d.dp); err != nil {
		return nil, err
	} else if n.packets > 0 {
		d.log.Info("discarded the feature counts from before the start", "packets", n.packets, "flows", n.flows,
			"since", snap.Start.Format(time.RFC3339))
	}
	if err := d.openAlerts(); err != nil {
		return nil, err
	}
	if err := d.bgp.open(now, d.store.Each); err != nil {
		d.alerts.close()
		return nil, err
	}
	if err := d.openTelemetry(); err != nil {
		d.bgp.close()
		d.alerts.close()
		return nil, err
	}
	return d, nil
}

func rails(cfg *config.Config) ban.Rails {
	r := cfg.Rails
	w4, w6 := r.AutoBanLimits()
	return ban.Rails{Allow: r.AllowPrefixes, Protected: r.ProtectedPrefixes, MaxNewPerInterval: r.MaxNewPerInterval,
		MaxTotal: r.MaxTotal, MonitorOnly: r.MonitorOnly, MaxEstablishedShare: r.MaxEstablishedShare,
		WidestBan4: r.MaxBanPrefixV4, WidestBan6: r.MaxBanPrefixV6, WidestAuto4: w4, WidestAuto6: w6}
}

// prefixLift is the share of its peak rate under which an automatic
// prefix ban counts as quiet (ban.Store.PrefixLift).
const prefixLift = 0.25

// openHardware opens the configured NIC tier; nil means XDP-only.
func openHardware(cfg *config.Config, log *slog.Logger) (tier.Table, error) {
	h := cfg.Hardware
	switch h.Backend {
	case "none":
		return nil, nil
	case "auto":
		t, err := autodetect.Backend(cfg.Interface, autodetect.Options{Capacity: h.Capacity})
		if errors.Is(err, tier.ErrUnsupported) {
			log.Warn("no hardware tier, running XDP-only", "reason", err)
			return nil, nil
		}
		return t, err
	case "flower":
		return flower.Open(cfg.Interface, h.Capacity)
	case "ntuple":
		return ntuple.Open(cfg.Interface, 0, h.Capacity)
	case "emulated":
		var t tier.Table
		err := InNetns(h.Emulated.Netns, func() error {
			var err error
			t, err = nicstage.AttachTable(h.Emulated.Wire, h.Emulated.Host, nicstage.Options{Capacity: h.Capacity})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("emulated NIC %s in netns %q: %w", h.Emulated.Wire, h.Emulated.Netns, err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: hardware.backend %q", config.ErrInvalid, h.Backend)
}

// InNetns runs f in the named network namespace ("" runs it in place).
func InNetns(name string, f func() error) error { return netnsx.Do(name, -1, f) }

func (d *Daemon) event(now time.Time, kind string, p netip.Prefix, format string, args ...any) {
	e := apiv1.Event{Time: now, Kind: kind, Prefix: p, Detail: fmt.Sprintf(format, args...), HostGroup: d.hostgroupOf(p)}
	d.journal.add(e)
	lvl := slog.LevelInfo
	switch kind {
	case "error", "breaker":
		lvl = slog.LevelError
	case "refused", "restore", "adopt", "slow":
		lvl = slog.LevelWarn
	case "detection":
		lvl = slog.LevelDebug
	}
	attrs := []any{"kind", kind}
	if p.IsValid() {
		attrs = append(attrs, "prefix", p.String())
	}
	d.log.Log(context.Background(), lvl, e.Detail, attrs...)
}

// reconcile loads the state file and makes state file and data plane
// agree, logging every difference. The state file is the truth for the
// daemon's bans; a rule found only in the data plane was added outside the
// daemon (CLI, a previous daemon that crashed before saving) and is
// adopted as an operator ban, never silently removed.
func (d *Daemon) reconcile(now time.Time) error {
	gone, err := d.store.Load(d.cfg.StateFile, now)
	if err != nil {
		return err
	}
	for _, w := range d.store.Warnings {
		d.event(now, "restore", netip.Prefix{}, "%s", w)
	}
	rules, err := d.dp.Blocked()
	if err != nil {
		return err
	}
	inDP := map[netip.Prefix]bool{}
	for _, r := range rules {
		inDP[r.Prefix] = true
	}
	for _, u := range gone {
		if inDP[u.Ban.Prefix] {
			d.unblock(now, u.Ban.Prefix)
			delete(inDP, u.Ban.Prefix)
		}
		d.event(now, "unban", u.Ban.Prefix, "%s", u.Why)
	}
	// Restored bans pass today's rails: the allowlist or the protected
	// space may have grown while the daemon was down. The passes go over
	// the prefixes, not All: each copy of every ban is ~200 B a ban at
	// the start, while the state file just read is still being collected.
	var guarded []netip.Prefix
	for _, p := range d.store.Prefixes() {
		if d.store.Guarded(p) != "" {
			guarded = append(guarded, p)
		}
	}
	slices.SortFunc(guarded, comparePrefix)
	for _, p := range guarded {
		why := d.store.Guarded(p)
		d.store.Remove(p)
		if inDP[p] {
			d.unblock(now, p)
			delete(inDP, p)
		}
		d.event(now, "refused", p, "ban from the state file is %s: lifted", why)
	}
	var restore []netip.Prefix
	for _, p := range d.store.Prefixes() {
		if !inDP[p] {
			restore = append(restore, p)
		}
	}
	slices.SortFunc(restore, comparePrefix)
	if len(restore) > 0 {
		for _, p := range d.blockEach(now, restore) {
			d.event(now, "restore", p, "ban in the state file was missing from the data plane: restored")
		}
	}
	for _, r := range rules {
		if !inDP[r.Prefix] {
			continue // lifted above (expired while the daemon was down)
		}
		if _, ok := d.store.Get(r.Prefix); !ok {
			// With the default TTL, not forever: a new or lost state file
			// made every pinned ban a permanent operator ban. An operator
			// who wants one kept re-adds it without a TTL.
			if _, err := d.store.Add(now, r.Prefix, "found in the data plane at start, not in the state file", d.cfg.Bans.TTL); err != nil {
				// The rails win over a rule nobody manages: lift it.
				d.unblock(now, r.Prefix)
				d.event(now, "refused", r.Prefix, "rule found in the data plane at start: %v; lifted", err)
				continue
			}
			d.event(now, "adopt", r.Prefix, "rule found in the data plane at start: adopted as an operator ban, %s", adoptedExpiry(d.cfg.Bans.TTL))
		}
	}
	// The first interval's rates start from the counters found here.
	ms := d.store.Meters()
	for _, r := range rules {
		if i := d.store.IndexOf(r.Prefix); i >= 0 {
			ms[i].Packets, ms[i].Read = r.Packets, true
		}
	}
	if _, err := d.card.rates(now, nil, nil); err != nil {
		return err
	}
	d.dirty = true
	d.countTiers()
	return d.save(now)
}

// comparePrefix orders prefixes as ban.Store.All does: by address, then
// length.
func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// adoptedExpiry says how long an adopted ban lasts.
func adoptedExpiry(ttl time.Duration) string {
	if ttl <= 0 {
		return "never expires (bans.ttl is 0)"
	}
	return fmt.Sprintf("expires in %v (bans.ttl)", ttl)
}

// save writes the state file when bans changed, and at least every
// refreshEvery otherwise, so refreshed expiries and rates reach the disk
// without rewriting a large file every interval.
func (d *Daemon) save(now time.Time) error {
	// The flow rules are few and change seldom: written when they change.
	if err := d.flow.saveFlowRules(now); err != nil {
		return err
	}
	if !d.dirty && !d.store.Dirty() && now.Sub(d.lastSave) < refreshEvery {
		return nil
	}
	if err := d.store.Save(d.cfg.StateFile, now); err != nil {
		return err
	}
	d.dirty, d.lastSave = false, now
	return nil
}

// flush is save for a clean stop: every ban's last rate, peak and expiry
// is written, not only what the refresh wrote up to 30 s before.
func (d *Daemon) flush(now time.Time) error {
	if err := d.flow.saveFlowRules(now); err != nil {
		return err
	}
	if err := d.store.Flush(d.cfg.StateFile, now); err != nil {
		return err
	}
	d.dirty, d.lastSave = false, now
	return nil
}

const refreshEvery = 30 * time.Second

func (d *Daemon) unblock(now time.Time, p netip.Prefix) {
	if err := d.card.evict(p); err != nil {
		d.event(now, "error", p, "removing from hardware: %v", err)
	}
	if err := d.dp.Unblock(p); err != nil && !errors.Is(err, datapath.ErrNoRule) {
		d.event(now, "error", p, "unblocking: %v", err)
	}
}

// unbanThreshold is the rate monitor's threshold: configured, else the
// rate detector's learned one (the paper's "highest rate from one source
// under normal activity"), else its static pps, else 100.
func (d *Daemon) unbanThreshold() float64 {
	if d.cfg.Bans.UnbanPPS > 0 {
		return d.cfg.Bans.UnbanPPS
	}
	if l, ok := d.det.learnedPPS(); ok {
		return l
	}
	if d.det.rate != nil && d.det.rate.Static.PPS > 0 {
		return d.det.rate.Static.PPS
	}
	return 100
}

// Step runs one interval of the loop: a list of short stages, each of
// which reads and writes the daemon's state on this goroutine.
func (d *Daemon) Step(now time.Time) (err error) {
	defer func(began time.Time) { d.stepDone(now, began, err) }(time.Now())
	d.steps++
	c := &d.clock
	c.start(time.Now())
	if err := d.dp.Check(); err != nil {
		return err
	}
	d.keepManagement(now)
	c.mark("check")
	tr, err := d.observe()
	if err != nil {
		return err
	}
	c.mark("observe")
	ds := d.detect(tr, d.heavy.takeDetections(now))
	d.recordDetections(now, ds)
	if d.store.Baselines == nil {
		d.store.Baselines = map[string]float64{}
	}
	d.dirty = d.det.keep(d.store.Baselines) || d.dirty
	c.mark("detect")
	d.heavy.followLearned(now)
	d.syncLists(now, ds)
	c.mark("lists")
	d.ban(now, tr, ds)
	c.mark("ban")
	d.heavy.settle(now)
	d.spareHostSessions(now)
	d.flow.mitigate(now)
	c.mark("mitigate")
	d.alertStep(now, tr, ds)
	ctrs, err := d.counters()
	if err != nil {
		return err
	}
	if err := d.flow.readFlowCounters(now); err != nil {
		d.event(now, "error", netip.Prefix{}, "%v", err)
	}
	c.mark("counters")
	if err := d.measure(now, ctrs); err != nil {
		return err
	}
	d.monitor(now)
	c.mark("monitor")
	d.syncBGP(now, d.obs.overflow)
	c.mark("bgp")
	if d.card.present() {
		if err := d.place(now); err != nil {
			d.event(now, "error", netip.Prefix{}, "placement: %v", err)
		}
	}
	c.mark("placement")
	d.summarize(tr)
	d.lastSnap = now
	err = d.save(now)
	c.mark("save")
	return err
}

// observe takes the interval's feature snapshot as per-source traffic.
func (d *Daemon) observe() (*detect.Traffic, error) {
	tr, snap, err := d.obs.take(d.dp, d.cfg.Interval)
	if err != nil {
		return nil, err
	}
	d.Metrics.mergeFallback.Add(float64(snap.MergeFallback))
	if tr.Overflow > 0 {
		d.event(snap.End, "overflow", netip.Prefix{}, "feature buffers full: %d packets of this interval not counted (raise capacity.features)", tr.Overflow)
	}
	d.src.track(snap.Start, tr)
	return tr, nil
}

// detect runs every enabled detector over the interval; heavy are the
// data plane's catches since the last one, judged with the rest.
func (d *Daemon) detect(tr *detect.Traffic, heavy []detect.Detection) []detect.Detection {
	if d.det.entropy != nil {
		// The entropy baseline learns only intervals without an attack
		// (the victim detector's, still on from the last interval) and
		// complete ones.
		d.det.entropy.Hold = tr.Overflow > 0 || d.flow.victims != nil && d.flow.victims.Attacks() > 0
		defer func() {
			e := d.det.entropy
			d.Metrics.entropyLearned.Set(float64(e.Learned()))
			pps, hs, hd := e.Last()
			bp, bs, bd, _ := e.Baseline()
			for _, x := range []struct {
				signal    string
				now, base float64
			}{{"pps", pps, bp}, {"src", hs, bs}, {"dst", hd, bd}} {
				d.Metrics.entropy.WithLabelValues(x.signal, "interval").Set(x.now)
				d.Metrics.entropy.WithLabelValues(x.signal, "baseline").Set(x.base)
			}
		}()
	}
	if d.flow.victims != nil {
		d.Metrics.attacksOn.Set(float64(d.flow.victims.Attacks()))
	}
	var ds []detect.Detection
	for _, det := range d.det.all() {
		out := det.Detect(tr)
		d.Metrics.detections.WithLabelValues(det.Name()).Add(float64(len(out)))
		ds = append(ds, out...)
	}
	ds = detect.AggregateIPv6(ds, d.cfg.Bans.AggregateIPv6, d.cfg.Bans.AggregateMin)
	// Already per source or per IPv6 prefix, as the data plane counted.
	ds = append(ds, heavy...)
	if v := d.flow.victims; v != nil {
		var spared int
		var example string
		if ds, spared, example = spareKnownGood(&v.Good, ds); spared > 0 {
			d.event(d.lastAt, "refused", netip.Prefix{}, "%d detections spared known-good clients, e.g. %s", spared, example)
			d.Metrics.refuse("known_good", spared)
		}
	}
	// The victim detector's source rungs are already aggregated as it
	// chose them: a prefix free of known-good clients.
	vs := d.flow.observeVictims(tr, d.obs.ports)
	d.Metrics.detections.WithLabelValues("victim").Add(float64(len(vs)))
	ds = append(ds, vs...)
	d.src.noteDetected(ds)
	return ds
}

// countBreaker counts the refusals of the breakers.
func countBreaker(rs []ban.Refusal) int {
	n := 0
	for _, r := range rs {
		if strings.HasPrefix(r.Why, "circuit breaker") {
			n++
		}
	}
	return n
}

// syncLists lifts list bans whose prefix left every threat list.
func (d *Daemon) syncLists(now time.Time, ds []detect.Detection) {
	if d.det.lists == nil {
		return
	}
	if err := d.det.lists.Err(); err != nil {
		d.event(now, "error", netip.Prefix{}, "threat list: %v (keeping the last good contents)", err)
	}
	for _, p := range delisted(d.store.ListBans("list"), ds) {
		d.lift(now, p, "no longer in any threat list")
	}
}

// lift ends a ban: store, both tiers, metrics, event.
func (d *Daemon) lift(now time.Time, p netip.Prefix, why string) {
	d.store.Remove(p)
	d.unblock(now, p)
	d.Metrics.unbans.Inc()
	d.event(now, "unban", p, "%s", why)
	d.dirty = true
}

// ban turns detections into bans through the rails and blocks them in
// XDP. The batch is all or nothing for the data plane, but one entry it
// refuses never sinks the others: they are retried one by one.
func (d *Daemon) ban(now time.Time, tr *detect.Traffic, ds []detect.Detection) {
	d.store.SetClients(d.flow.verifiedClients())
	share, established := d.src.establishedShare()
	d.log.Debug("interval", "sources", len(tr.Sources), "established", established)
	added, refused, breaker := d.store.Propose(now, ds, share)
	if breaker && !d.breaker {
		d.event(now, "breaker", netip.Prefix{}, "circuit breaker open: %d new bans refused this interval", countBreaker(refused))
	}
	d.breaker = breaker
	d.reportRefusals(now, refused)
	var ps []netip.Prefix
	for _, b := range added {
		if err := d.admit(b.Prefix); err != nil {
			d.store.Remove(b.Prefix)
			d.Metrics.refuse("invalid", 1)
			d.event(now, "refused", b.Prefix, "%s: %v", b.Detector, err)
			continue
		}
		ps = append(ps, b.Prefix)
	}
	if len(ps) == 0 {
		return
	}
	blocked := d.blockEach(now, ps)
	applied := time.Now()
	for _, p := range blocked {
		b, _ := d.store.Get(p)
		d.event(now, "ban", p, "%s: %s", b.Detector, b.Reason)
		d.Metrics.bans.Inc()
		if h := d.src.get(p.Addr()); h != nil && p.IsSingleIP() {
			d.Metrics.detectToDrop.Observe(applied.Sub(time.Unix(0, h.first)).Seconds())
		}
	}
	d.dirty = true
}

// blockEach blocks ps as one batch; when the data plane refuses the batch
// (all or nothing), each entry is tried alone, so one it refuses never
// sinks the others. Refused entries leave the store, with an event. It
// returns what is blocked.
func (d *Daemon) blockEach(now time.Time, ps []netip.Prefix) []netip.Prefix {
	err := d.dp.Block(ps...)
	if err == nil {
		return ps
	}
	if len(ps) == 1 {
		d.store.Remove(ps[0])
		d.event(now, "error", ps[0], "blocking: %v", err)
		return nil
	}
	var blocked []netip.Prefix
	for _, p := range ps {
		if err := d.dp.Block(p); err != nil {
			d.store.Remove(p)
			d.event(now, "error", p, "blocking: %v (the others of the batch are applied)", err)
			continue
		}
		blocked = append(blocked, p)
	}
	return blocked
}

// admit checks a new ban before the data plane sees it: it must be a
// valid rule, and the allowlisted or protected space it overlaps must pass
// in the data plane's allowlist first (which wins over every block).
func (d *Daemon) admit(p netip.Prefix) error {
	if err := rule.CheckPrefix(p); err != nil {
		return err
	}
	if ex := d.store.Exempt(p); len(ex) > 0 {
		if err := d.dp.Allow(ex...); err != nil {
			return fmt.Errorf("allowlisting %v inside it first: %w", ex, err)
		}
	}
	return nil
}

// reportRefusals counts every refusal and logs one event per reason per
// interval, with how many it covered: an open breaker or a full table must
// not write a line per detection.
func (d *Daemon) reportRefusals(now time.Time, refused []ban.Refusal) {
	type group struct {
		n     int
		first ban.Refusal
	}
	by := map[string]*group{}
	var order []string
	for _, r := range refused {
		d.Metrics.refuse(r.Why, 1)
		key := r.Detection.Detector + ": " + refusalKind(r.Why)
		g := by[key]
		if g == nil {
			g = &group{first: r}
			by[key] = g
			order = append(order, key)
		}
		g.n++
	}
	for _, k := range order {
		g := by[k]
		if g.n == 1 {
			d.event(now, "refused", g.first.Detection.Prefix, "%s: %s", g.first.Detection.Detector, g.first.Why)
			continue
		}
		d.event(now, "refused", g.first.Detection.Prefix, "%s: %s (and %d more this interval)", g.first.Detection.Detector, g.first.Why, g.n-1)
	}
}

// refusalKind is a refusal's reason without the prefix it names, so that
// refusals for the same rail group together.
func refusalKind(why string) string {
	if i := strings.IndexAny(why, "(0123456789"); i > 0 {
		return why[:i]
	}
	return why
}

// counters reads the XDP counters of every ban, in the store's dense
// order, into a slice kept across intervals.
func (d *Daemon) counters() ([]datapath.Reading, error) {
	ps := d.store.Prefixes()
	if cap(d.readings) < len(ps) {
		d.readings = make([]datapath.Reading, len(ps), len(ps)+len(ps)/4)
	}
	d.readings = d.readings[:len(ps)]
	if err := d.dp.RuleCountersInto(ps, d.readings); err != nil {
		return nil, fmt.Errorf("reading rule counters: %w", err)
	}
	return d.readings, nil
}

// monitor lifts the bans whose rate stayed under the threshold for the
// hold time (the paper's rate monitor).
func (d *Daemon) monitor(now time.Time) {
	for _, u := range d.store.MonitorMeters(now, d.unbanThreshold(), d.cfg.Bans.Hold) {
		d.unblock(now, u.Ban.Prefix)
		d.Metrics.unbans.Inc()
		d.event(now, "unban", u.Ban.Prefix, "%s", u.Why)
		d.dirty = true
	}
}

// measure computes each ban's rate over the interval: from the growth of
// its XDP counter, and for sources placement manages, from placement's
// reading of both tiers (it owns the hardware table, and for a table
// without counters it knows the rate a source had when offloaded).
func (d *Daemon) measure(now time.Time, ctrs []datapath.Reading) error {
	secs := now.Sub(d.lastAt).Seconds()
	first := d.lastAt.IsZero()
	d.lastAt = now
	ps, ms := d.store.Prefixes(), d.store.Meters()
	hw, err := d.card.rates(now, ps, ctrs)
	if err != nil {
		return err
	}
	// While the card polices flow rules it may drop a banned source's
	// packets before XDP counts them on the ban (a policer matches the
	// destination, whatever the source): a ban not in the card's table
	// then keeps the rate it had, as placement keeps the rate of a ban a
	// table without counters holds, or its quiet counters would lift it
	// while its flood goes on.
	blind := d.flow.nic.policing()
	// Meters are the store's, parallel to ps: no map lookup per ban.
	for i, r := range ctrs {
		if !r.Found {
			continue
		}
		m := &ms[i]
		prev, seen := m.Packets, m.Read
		m.Packets, m.Read = r.Packets, true
		if blind && d.card.tierOf(ps[i]) != "hw" {
			continue
		}
		if hw != nil && ps[i].IsSingleIP() {
			if rate, ok := hw[ps[i].Addr()]; ok {
				if seen && !first {
					m.Rate, m.Measured = rate, true
				}
				continue
			}
		}
		if seen && !first && secs > 0 && r.Packets >= prev {
			m.Rate, m.Measured = float64(r.Packets-prev)/secs, true
		}
	}
	return nil
}

// place runs Listing 1 over the rates measure read and records each
// source's tier.
func (d *Daemon) place(now time.Time) error {
	rep, err := d.card.place()
	if err != nil {
		return err
	}
	for _, e := range rep.Failed {
		d.event(now, "error", netip.Prefix{}, "hardware update: %v", e)
	}
	if n := rep.Plan.Updates(); n > 0 {
		d.Metrics.placementUpdates.Add(float64(rep.Applied))
		d.Metrics.hwLatency.Observe(rep.Latency.Seconds())
		d.dirty = true
	}
	return nil
}

func (d *Daemon) summarize(tr *detect.Traffic) {
	d.obs.top = tr.Top(100) // read by the API on this goroutine (Top)
	d.countTiers()
}

// countTiers publishes bans per tier for the metrics collector: the
// sources in the NIC's table (only bans are offloaded), the rest in XDP.
func (d *Daemon) countTiers() {
	hw := d.card.occupancy()
	tc := map[string]int{"hw": hw, "xdp": d.store.Len() - hw}
	d.mu.Lock()
	d.tierCounts = tc
	d.mu.Unlock()
}

// Run drives the loop until ctx ends. reload receives a signal per SIGHUP.
func (d *Daemon) Run(ctx context.Context, reload <-chan struct{}) error {
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	d.log.Info("tierwall running", "interface", d.cfg.Interface, "interval", d.cfg.Interval, "hardware", d.card.name(), "bans", d.store.Len())
	// Type=notify: New attached the filter and the API listens (run.go
	// serves it before Run). The watchdog is fed from this loop, so a
	// wedged interval or request is what gets the daemon restarted.
	d.notify(sdnotify.Ready)
	var watchdog <-chan time.Time
	if p := sdnotify.WatchdogInterval(); p > 0 {
		wd := time.NewTicker(p)
		defer wd.Stop()
		watchdog = wd.C
	}
	for {
		select {
		case <-ctx.Done():
			d.notify(sdnotify.Stopping)
			return d.shutdown()
		case <-watchdog:
			d.notify(sdnotify.Watchdog)
		case now := <-tick.C:
			if err := d.Step(now); err != nil {
				d.event(now, "error", netip.Prefix{}, "interval: %v", err)
				if errors.Is(err, datapath.ErrOrphaned) {
					// Writing on would protect nothing: exit non-zero so the
					// service manager starts a daemon that re-adopts.
					return errors.Join(fmt.Errorf("the filter on %s is no longer this daemon's: %w", d.cfg.Interface, err), d.shutdown())
				}
			}
		case f := <-d.reqs:
			f()
		case <-d.bgp.changed():
			// A peer's FlowSpec applies now, not at the next interval: a
			// fleet's ban reaches this host's XDP in milliseconds.
			d.bgp.applyRemote(time.Now(), d.fleetHost())
		case <-reload:
			old := d.cfg.Interval
			d.reload(time.Now())
			if d.cfg.Interval != old {
				tick.Reset(d.cfg.Interval)
			}
		}
	}
}

// notify tells systemd state; a failure is logged, never fatal (the
// watchdog, if on, restarts a daemon that cannot reach it).
func (d *Daemon) notify(state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		d.log.Warn("systemd notification failed", "err", err)
	}
}

// reload re-reads the configuration; a bad one is logged and the last good
// one stays. Changes that need new attachments (interface, hardware, API)
// are reported and wait for a restart.
func (d *Daemon) reload(now time.Time) {
	c, err := config.Load(d.cfgPath)
	if err != nil {
		d.Metrics.reloads.WithLabelValues(reloadRefused).Inc()
		d.event(now, "error", netip.Prefix{}, "reload refused, keeping the running configuration: %v", err)
		return
	}
	changed := configChanges(d.cfg, c)
	// The speaker's sessions and its validation are built at start; the
	// announce policy (bgp.announce) is read every interval and reloads.
	sameBGP := func(a, b config.BGP) bool {
		a.Announce, b.Announce = config.BGPAnnounce{}, config.BGPAnnounce{}
		return reflect.DeepEqual(a, b)
	}
	if c.Interface != d.cfg.Interface || !reflect.DeepEqual(c.Hardware, d.cfg.Hardware) || !reflect.DeepEqual(c.API, d.cfg.API) || c.StateFile != d.cfg.StateFile ||
		!sameBGP(c.BGP, d.cfg.BGP) {
		c.Interface, c.Hardware, c.API, c.StateFile = d.cfg.Interface, d.cfg.Hardware, d.cfg.API, d.cfg.StateFile
		ann := c.BGP.Announce
		c.BGP = d.cfg.BGP
		c.BGP.Announce = ann
	}
	if c.Capacity.MemoryMiB != d.cfg.Capacity.MemoryMiB {
		// The tables were sized at attach: the new budget is checked
		// against the running capacities, and a budget they leave too
		// little of keeps the old one.
		run := *d.cfg
		run.Capacity.MemoryMiB = c.Capacity.MemoryMiB
		if err := applyMemoryBudget(&run, d.log); err != nil {
			d.event(now, "error", netip.Prefix{}, "reload: keeping capacity.memory_mib %d: %v", d.cfg.Capacity.MemoryMiB, err)
			c.Capacity.MemoryMiB = d.cfg.Capacity.MemoryMiB
		}
	}
	if c.NiceOrDefault() != d.cfg.NiceOrDefault() {
		if err := setNice(c.NiceOrDefault(), d.log); err != nil {
			d.event(now, "error", netip.Prefix{}, "reload: keeping nice %d: %v", d.cfg.NiceOrDefault(), err)
			c.Nice = d.cfg.Nice
		}
	}
	detChanged := !reflect.DeepEqual(c.Detectors, d.cfg.Detectors)
	d.cfg = c
	d.store.Rails, d.store.TTL = rails(c), c.Bans.TTL
	d.refreshManagement(now)
	d.dropCuttingRules(now) // rails.management_ports may have grown
	d.reloadTelemetry(now)  // network mode's policy now, not at the next interval
	if detChanged {
		d.det = newDetectorSet(c)
		d.det.restore(d.store.Baselines) // a reload never relearns (an attack may be running)
	}
	d.wireHostGroups()
	if err := d.heavy.open(d.dp, d.protected()); err != nil {
		d.event(now, "error", netip.Prefix{}, "reload: %v", err)
	}
	if d.card.present() {
		d.card.off.Params.MaxRate = c.Hardware.MaxRate
	}
	summary, restart := reloadSummary(changed)
	result := reloadApplied
	if restart {
		result = reloadRestart
	}
	d.Metrics.reloads.WithLabelValues(result).Inc()
	d.event(now, "reload", netip.Prefix{}, "%s", summary)
}

// shutdown saves the state and takes rules out of hardware (they stay
// blocked in XDP, which keeps running without the daemon); the data plane
// is left attached.
func (d *Daemon) shutdown() error { return d.stop(time.Now()) }

// stop is shutdown at now (tests give their clock).
func (d *Daemon) stop(now time.Time) error {
	var errs []error
	if d.card.present() {
		if err := d.card.off.Flush(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("removing hardware rules: %w", err))
		}
		// The flow rules stay in XDP; the card's copies of them go
		// with the daemon that would have taken them off.
		if err := d.flow.unpolice(); err != nil {
			errs = append(errs, fmt.Errorf("removing the card's flow policers: %w", err))
		}
		d.card.table.Close()
	}
	if err := d.flush(now); err != nil {
		errs = append(errs, err)
	}
	d.alerts.close()
	d.closeTelemetry()
	d.bgp.close()
	d.dp.Close()
	d.owner.Release()
	d.log.Info("tierwall stopped; the XDP filter keeps enforcing the bans", "bans", d.store.Len())
	return errors.Join(errs...)
}

// Do runs f on the loop goroutine and waits for it: how the API reads and
// changes state. ctx bounds only the wait for the loop to take f: once
// taken, f runs to the end and Do reports what happened, so a caller never
// hears "timed out" about a change that was applied.
func (d *Daemon) Do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case d.reqs <- func() { f(); close(done) }:
	case <-ctx.Done():
		return fmt.Errorf("%w: the daemon was busy, nothing was done", ctx.Err())
	}
	<-done
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// JudgeConfig is a detector's whole role: what it consumes, how it
// judges and plans, and whom it tells.
type JudgeConfig struct {
	Consumer DetectorConfig
	// Telemetry is network mode's configuration: its Detector and Action
	// are used (the detector listens to no router).
	Telemetry telemetry.Config
	// OnChange is called from the judging goroutine for every tick that
	// changed something, as telemetry.Start's onChange.
	OnChange func(telemetry.Change)
	// OnQuiet is called from the same goroutine when collectors go quiet
	// (their routers' share is missing from every rate) or come back.
	OnQuiet func(quiet, back []string)
}

// Judge is a detector as telemetry.Service is network mode in one
// process: it feeds network mode's detector from its partitions, judges
// as soon as every collector has reported a tick (else at its own tick),
// and plans the upstream actions; the caller announces them.
type Judge struct {
	cfg  JudgeConfig
	det  *telemetry.Detector
	cons *Consumer
	ifs  *UplinkTable
	sub  *nats.Subscription
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	plan   []telemetry.Upstream
	action telemetry.ActionConfig
	replan bool
	quiet  []string
}

// StartJudge consumes cfg.Consumer's partitions and judges until Close.
func StartJudge(ctx context.Context, nc *nats.Conn, cfg JudgeConfig, log *slog.Logger) (*Judge, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Consumer.Stream.defaults()
	j := &Judge{cfg: cfg, det: telemetry.NewDetector(cfg.Telemetry.Detector), stop: make(chan struct{}), action: cfg.Telemetry.Action,
		ifs: NewUplinkTable(cfg.Telemetry.Action)}
	// The collectors' interface reports (uplinks.go); subscribed first,
	// so that the uplinks are known as early as the aggregates come.
	sub, err := nc.Subscribe(InterfacesSubject(cfg.Consumer.Stream.Subject), func(m *nats.Msg) {
		if err := j.ifs.Handle(m.Data, time.Now()); err != nil && j.ifs.Stats().Malformed == 1 {
			log.Warn("scaleout: interface report refused", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to interface reports: %w", err)
	}
	// A few reports every few seconds: what queues past this is a
	// flood, dropped by the client (and counted by the server).
	if err := sub.SetPendingLimits(256, 16<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to interface reports: %w", err)
	}
	j.sub = sub
	cons, err := Consume(ctx, nc, cfg.Consumer, j.det, log)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	j.cons = cons
	j.wg.Add(1)
	go j.run()
	return j, nil
}

func (j *Judge) run() {
	defer j.wg.Done()
	tick := j.det.Config().Tick
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var judged int64 // the tick last judged in
	quiet := map[string]bool{}
	for {
		select {
		case <-j.stop:
			return
		case <-j.cons.Completed():
			// Every collector has reported the tick just ended: judged
			// now rather than at this detector's own tick.
		case now := <-tk.C:
			// The fallback, when a collector is late; not twice in a
			// tick.
			if now.UnixNano()/int64(tick) <= judged {
				continue
			}
		}
		// Not the ticker's time: records merged since are newer.
		now := time.Now()
		judged = now.UnixNano() / int64(tick)
		if c, ok := j.Tick(now); ok && j.cfg.OnChange != nil {
			j.cfg.OnChange(c)
		}
		j.watchQuiet(quiet)
	}
}

// watchQuiet reports the collectors silent for a second while others
// report, and those back, once each.
func (j *Judge) watchQuiet(was map[string]bool) {
	now := j.cons.Quiet(time.Second)
	var gone, back []string
	is := map[string]bool{}
	for _, n := range now {
		is[n] = true
		if !was[n] {
			gone = append(gone, n)
		}
	}
	for n := range was {
		if !is[n] {
			back = append(back, n)
		}
	}
	if len(gone)+len(back) == 0 {
		return
	}
	clear(was)
	for n := range is {
		was[n] = true
	}
	slices.Sort(back)
	j.mu.Lock()
	j.quiet = now
	j.mu.Unlock()
	if j.cfg.OnQuiet != nil {
		j.cfg.OnQuiet(gone, back)
	}
}

// Tick judges at now and plans; ok reports a change. The judging
// goroutine calls it; tests may call it with their own clock.
func (j *Judge) Tick(now time.Time) (telemetry.Change, bool) {
	started, ended := j.det.Judge(now)
	var cur []telemetry.Attack
	for _, a := range j.det.Attacks() {
		if a.Ended.IsZero() {
			cur = append(cur, a)
		}
	}
	j.mu.Lock()
	act, _ := telemetry.Capacities(j.action, j.ifs, now)
	plan := telemetry.Plan(cur, act)
	changed := j.replan || !reflect.DeepEqual(samePlan(plan), samePlan(j.plan))
	j.plan, j.replan = plan, false
	j.mu.Unlock()
	return telemetry.Change{Now: now, Started: started, Ended: ended, Plan: plan, PlanChanged: changed},
		changed || len(started) > 0 || len(ended) > 0
}

// samePlan leaves what makes two plans the same announcements (not
// their rates, which move every tick).
func samePlan(p []telemetry.Upstream) []telemetry.Upstream {
	out := make([]telemetry.Upstream, len(p))
	for i, u := range p {
		out[i] = telemetry.Upstream{Attack: u.Attack, Kind: u.Kind, Rule: u.Rule, Prefix: u.Prefix}
	}
	return out
}

// SetConfig applies a reloaded configuration: thresholds, host groups
// and policies, and the action policy, from the next tick on, which
// reports its plan as changed (telemetry.Service.SetConfig's contract).
// The partitions, the stream and the tick keep their values until a
// restart.
func (j *Judge) SetConfig(tc telemetry.Config) {
	j.det.SetConfig(tc.Detector)
	j.ifs.SetUplinks(tc.Action)
	j.mu.Lock()
	j.action, j.replan = tc.Action, true
	j.mu.Unlock()
}

// Status is the detector's state for the operator (/v1/telemetry): no
// listen addresses nor exporters (its collectors have those).
func (j *Judge) Status(n int) telemetry.Status {
	st := telemetry.Status{Enabled: true, Listen: []netip.AddrPort{}, Exporters: []telemetry.ExporterStats{},
		Untracked: j.det.Untracked(), Attacks: j.det.Attacks(), Top: j.det.Top(n)}
	j.mu.Lock()
	st.Mode = j.action.Mode
	st.Plan = append([]telemetry.Upstream{}, j.plan...)
	_, st.Capacities = telemetry.Capacities(j.action, j.ifs, time.Now())
	j.mu.Unlock()
	if st.Attacks == nil {
		st.Attacks = []telemetry.Attack{}
	}
	if st.Top == nil {
		st.Top = []telemetry.Talker{}
	}
	return st
}

// Detector is network mode's detector the judge feeds.
func (j *Judge) Detector() *telemetry.Detector { return j.det }

// Consumer is the judge's consuming side (its counters and collectors).
func (j *Judge) Consumer() *Consumer { return j.cons }

// Uplinks is the judge's view of its groups' uplinks (their reports'
// counters, and the source of its capacities).
func (j *Judge) Uplinks() *UplinkTable { return j.ifs }

// Capacities are the host groups' uplink capacities as the judge plans
// with them now.
func (j *Judge) Capacities() []telemetry.GroupUplinks {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, caps := telemetry.Capacities(j.action, j.ifs, time.Now())
	return caps
}

// Quiet are the collectors last found quiet.
func (j *Judge) Quiet() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.quiet)
}

// Close stops judging and consuming.
func (j *Judge) Close() {
	close(j.stop)
	j.wg.Wait()
	j.cons.Close()
	_ = j.sub.Unsubscribe()
}

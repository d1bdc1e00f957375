// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/scaleout"
	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// Network mode beyond one process (telemetry.scaleout:, docs/SCALEOUT.md).
// A collector decodes its routers' telemetry and publishes per-destination
// aggregates to NATS JetStream; it judges nothing and announces nothing. A
// detector judges the partitions it owns from every collector's
// aggregates and hands each tick's change to telemetryChanged, the path
// network mode in one process takes: its plan is announced through the
// merged speaker, under the same mode and rails.monitor_only, with the
// same events and notifications.

// scaleoutRole is the running role: one of col and judge.
type scaleoutRole struct {
	nc    *nats.Conn
	col   *scaleout.Collector
	judge *scaleout.Judge
}

// startTimeout bounds the stream's creation and the first subscriptions
// at start: past it the bus is not answering, and the daemon says so
// rather than hang before serving its API.
const startTimeout = 10 * time.Second

// openScaleout connects to the bus and starts sc's role.
func (d *Daemon) openScaleout(tc telemetry.Config, sc config.Scaleout) error {
	nc, err := scaleout.Connect(sc.URL, "tierwall "+sc.Role+" "+sc.Name, sc.Auth)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.tele.ctx, startTimeout)
	defer cancel()
	so := &scaleoutRole{nc: nc}
	switch sc.Role {
	case config.ScaleoutCollector:
		so.col, err = scaleout.StartCollector(ctx, nc, scaleout.CollectorConfig{Listen: tc.Listen, Decoder: tc.Decoder,
			Detector: tc.Detector, Publisher: sc.Publisher}, d.log)
		if err != nil {
			nc.Close()
			return err
		}
		d.Metrics.Registry.MustRegister(scaleout.NewCollectorMetrics(so.col), telemetry.ExporterMetrics{Dec: so.col.Decoder()})
		d.log.Info("network mode: scale-out collector publishing", "nats", sc.URL, "name", sc.Name, "listen", so.col.Addrs(),
			"exporters", len(tc.Decoder.Exporters), "partitions", sc.Publisher.Partitioner.N)
	case config.ScaleoutDetector:
		so.judge, err = scaleout.StartJudge(ctx, nc, scaleout.JudgeConfig{Consumer: sc.Detector, Telemetry: tc,
			OnChange: d.telemetryChanged, OnQuiet: d.collectorsQuiet}, d.log)
		if err != nil {
			nc.Close()
			return err
		}
		d.Metrics.Registry.MustRegister(scaleout.NewJudgeMetrics(so.judge), telemetry.CapacityMetrics{Caps: so.judge.Capacities})
		owned := "all"
		if sc.Detector.Owned != nil {
			owned = fmt.Sprint(sc.Detector.Owned)
		}
		d.log.Info("network mode: scale-out detector judging", "nats", sc.URL, "name", sc.Name, "partitions", sc.Detector.Partitioner.N,
			"owned", owned, "mode", tc.Action.Mode)
	}
	d.tele.so = so
	return nil
}

// collectorsQuiet runs on the judge's goroutine: reported through the
// loop, as network mode's changes are.
func (d *Daemon) collectorsQuiet(quiet, back []string) {
	now := time.Now()
	report := func() {
		if len(quiet) > 0 {
			d.event(now, "telemetry", netip.Prefix{}, "scale-out: collectors quiet (their routers' share is missing from every rate): %s", strings.Join(quiet, ", "))
		}
		if len(back) > 0 {
			d.event(now, "telemetry", netip.Prefix{}, "scale-out: collectors reporting again: %s", strings.Join(back, ", "))
		}
	}
	select {
	case d.tele.reports <- report:
	default:
		d.log.Warn("telemetry: report queue full, events dropped", "quiet", quiet, "back", back)
	}
}

// closeScaleout stops the role: a collector publishes its last tick
// (waiting up to a few seconds for the server), a detector stops judging
// (what it announced is withdrawn with the speaker's sessions).
func (d *Daemon) closeScaleout() {
	so := d.tele.so
	if so == nil {
		return
	}
	if so.col != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := so.col.Close(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Warn("scale-out collector: closing", "err", err)
		}
		cancel()
	}
	if so.judge != nil {
		so.judge.Close()
	}
	so.nc.Close()
	d.tele.so = nil
}

func (so *scaleoutRole) status(top int) telemetry.Status {
	if so.col != nil {
		return so.col.Status()
	}
	return so.judge.Status(top)
}

// setConfig applies a reloaded policy: a detector's thresholds, groups
// and actions; a collector counts the same whatever they are.
func (so *scaleoutRole) setConfig(tc telemetry.Config) {
	if so.judge != nil {
		so.judge.SetConfig(tc)
	}
}

// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/url"
	"os/exec"
	"time"
)

// Alerts is where attack notifications go and what the attack reports
// keep (package alert).
type Alerts struct {
	// Webhooks are URLs (http or https), each POSTed the report as JSON
	// on an attack's start, escalation and end.
	Webhooks       []string      `yaml:"webhooks"`
	WebhookTimeout time.Duration `yaml:"webhook_timeout"` // per attempt (default 5s)
	Retries        int           `yaml:"retries"`         // attempts after the first (default 3)
	Backoff        time.Duration `yaml:"backoff"`         // before the first retry, doubling (default 1s)
	// Exec is a command and its arguments, run without a shell, with the
	// report as JSON on stdin.
	Exec        []string      `yaml:"exec"`
	ExecTimeout time.Duration `yaml:"exec_timeout"` // default 10s
	// Queue bounds the notifications waiting to be sent; beyond it they
	// are dropped and counted (tierwall_alerts_dropped_total).
	Queue int `yaml:"queue"`
	// EndAfter intervals without a detection, with the victim's
	// mitigations withdrawn, end an attack.
	EndAfter int `yaml:"end_after"`
	// SampleEvery: during an attack, 1 in this many dropped packets is
	// sampled into its pcap (0: no pcap); SamplePackets caps the pcap.
	SampleEvery   int `yaml:"sample_every"`
	SamplePackets int `yaml:"sample_packets"`
	// LogMaxBytes is the attack log's size before it rotates.
	LogMaxBytes int64 `yaml:"log_max_bytes"`
}

func defaultAlerts() Alerts {
	return Alerts{WebhookTimeout: 5 * time.Second, Retries: 3, Backoff: time.Second, ExecTimeout: 10 * time.Second,
		Queue: 64, EndAfter: 5, SampleEvery: 16, SamplePackets: 500, LogMaxBytes: 4 << 20}
}

func (a *Alerts) validate() error {
	for i, s := range a.Webhooks {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad(fmt.Sprintf("alerts.webhooks[%d]", i), s, "is not an http or https URL")
		}
	}
	if len(a.Exec) > 0 {
		if _, err := exec.LookPath(a.Exec[0]); err != nil {
			return bad("alerts.exec[0]", a.Exec[0], "cannot be run: "+err.Error())
		}
	}
	for f, d := range map[string]time.Duration{"alerts.webhook_timeout": a.WebhookTimeout, "alerts.backoff": a.Backoff,
		"alerts.exec_timeout": a.ExecTimeout} {
		if d <= 0 || d > 5*time.Minute {
			return bad(f, d, "outside 1ns..5m")
		}
	}
	for f, r := range map[string][3]int{"alerts.retries": {a.Retries, 0, 10}, "alerts.queue": {a.Queue, 1, 10000},
		"alerts.end_after": {a.EndAfter, 1, 10000}, "alerts.sample_every": {a.SampleEvery, 0, 1 << 20},
		"alerts.sample_packets": {a.SamplePackets, 0, 100000}} {
		if r[0] < r[1] || r[0] > r[2] {
			return bad(f, r[0], fmt.Sprintf("outside %d..%d", r[1], r[2]))
		}
	}
	if a.LogMaxBytes < 4096 || a.LogMaxBytes > 1<<30 {
		return bad("alerts.log_max_bytes", a.LogMaxBytes, "outside 4096..1073741824")
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/scaleout"
)

// RoleNetwork is a daemon that runs network mode only (telemetry:): a
// collector box of the routers' telemetry, or a scale-out detector, with
// no interface and no XDP data plane; its actions go upstream through the
// BGP speaker.
const RoleNetwork = "network"

// Scale-out roles (telemetry.scaleout.role); "" is network mode in one
// process.
const (
	ScaleoutCollector = "collector"
	ScaleoutDetector  = "detector"
)

// TelemetryScaleout is network mode split over NATS JetStream
// (docs/SCALEOUT.md): collectors decode their routers' telemetry and
// publish per-destination aggregates; each detector judges the
// partitions it owns and announces through its own BGP speaker. Every
// collector and detector of a deployment must have the same partitions,
// stream, subject and host groups, and the same telemetry.tick.
type TelemetryScaleout struct {
	// Role: collector or detector ("": network mode in one process).
	Role string `yaml:"role"`
	// NATS is the server's URL (nats://host:4222; several, comma
	// separated, for a cluster), JetStream enabled.
	NATS string `yaml:"nats"`
	// TLS: the CA that signed the server's certificate (ca), and this
	// process's certificate and key (cert, key) when the server verifies
	// its clients. Files in PEM. A tls:// URL, or any of these, turns TLS
	// on.
	TLS ScaleoutTLS `yaml:"tls"`
	// Credentials is a NATS credentials file (a user JWT and its NKey
	// seed, as nsc writes it) for servers in operator mode.
	Credentials string `yaml:"credentials"`
	// Name identifies this process in its messages and on the server
	// (default: the host name): unique per collector, since detectors
	// track collectors by it. At most 64 bytes.
	Name string `yaml:"name"`
	// Partitions of the destinations (16), 1..65535.
	Partitions int `yaml:"partitions"`
	// Owned: the partitions a detector judges, as "0-7,9" (default: all).
	Owned string `yaml:"owned"`
	// Stream and Subject name the JetStream stream (TIERWALL_AGGREGATES)
	// and the prefix of its subjects (tierwall.aggregates).
	Stream  string `yaml:"stream"`
	Subject string `yaml:"subject"`
	// MaxAge (30s, 1s..1h), MaxBytes (256 MiB, 1 MiB..64 GiB) and
	// Replicas (1, 1..5) bound the stream; Replay (2s, up to MaxAge) is
	// what a starting detector reads again from it.
	MaxAge   time.Duration `yaml:"max_age"`
	MaxBytes int64         `yaml:"max_bytes"`
	Replicas int           `yaml:"replicas"`
	Replay   time.Duration `yaml:"replay"`
}

// ScaleoutTLS is telemetry.scaleout.tls: PEM files.
type ScaleoutTLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Scaleout is telemetry.scaleout resolved for package scaleout: the
// role's side is filled in (Publisher for a collector, Detector for a
// detector), with the partitioner both share.
type Scaleout struct {
	Role      string
	URL, Name string
	Auth      scaleout.Auth
	Publisher scaleout.PublisherConfig
	Detector  scaleout.DetectorConfig
}

var (
	// streamName: JetStream refuses '.', '*', '>', spaces and path
	// separators in a stream's name.
	streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// subjectToken: a subject prefix of plain tokens, no wildcards.
	subjectPrefix = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// ScaleoutConfig checks telemetry.scaleout and resolves it; its Role is
// "" when network mode runs in one process.
func (c *Config) ScaleoutConfig() (Scaleout, error) {
	s := c.Telemetry.Scaleout
	const f = "telemetry.scaleout"
	switch s.Role {
	case ScaleoutCollector, ScaleoutDetector:
	case "":
		if s != (TelemetryScaleout{}) {
			return Scaleout{}, bad(f+".role", `""`, "is required with the other scaleout fields: collector or detector")
		}
		return Scaleout{}, nil
	default:
		return Scaleout{}, bad(f+".role", s.Role, "is not collector or detector")
	}
	out := Scaleout{Role: s.Role, URL: s.NATS, Name: s.Name}
	if s.NATS == "" {
		return out, bad(f+".nats", `""`, "is required: the NATS server's URL, such as nats://10.0.0.5:4222")
	}
	if len(s.NATS) > 1024 {
		return out, bad(f+".nats", fmt.Sprintf("%d bytes", len(s.NATS)), "is longer than 1024 bytes")
	}
	for _, u := range strings.Split(s.NATS, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" || p.Hostname() == "" {
			return out, bad(f+".nats", u, "is not a URL such as nats://10.0.0.5:4222")
		}
		switch p.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return out, bad(f+".nats", u, "is not a nats://, tls://, ws:// or wss:// URL")
		}
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		return out, bad(f+".tls", fmt.Sprintf("cert %q, key %q", s.TLS.Cert, s.TLS.Key), "needs both cert and key, or neither")
	}
	for field, path := range map[string]string{"tls.ca": s.TLS.CA, "tls.cert": s.TLS.Cert, "tls.key": s.TLS.Key, "credentials": s.Credentials} {
		if path != "" && !filepath.IsAbs(path) {
			return out, bad(f+"."+field, path, "is not an absolute path")
		}
	}
	out.Auth = scaleout.Auth{CA: s.TLS.CA, Cert: s.TLS.Cert, Key: s.TLS.Key, Credentials: s.Credentials}
	if out.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return out, bad(f+".name", `""`, "is required: this host has no name to default to")
		}
		out.Name = h
	}
	if len(out.Name) > 64 || strings.ContainsFunc(out.Name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return out, bad(f+".name", out.Name, "must be at most 64 bytes, without control characters")
	}
	n := s.Partitions
	if n == 0 {
		n = 16
	}
	if n < 1 || n > 65535 {
		return out, bad(f+".partitions", s.Partitions, "outside 1..65535")
	}
	if s.Stream != "" && !streamName.MatchString(s.Stream) {
		return out, bad(f+".stream", s.Stream, "is not a stream name (letters, digits, _ and -, at most 64)")
	}
	if s.Subject != "" && (len(s.Subject) > 128 || !subjectPrefix.MatchString(s.Subject)) {
		return out, bad(f+".subject", s.Subject, "is not a subject prefix (tokens of letters, digits, _ and - joined by '.', no wildcards, at most 128)")
	}
	if s.MaxAge != 0 && (s.MaxAge < time.Second || s.MaxAge > time.Hour) {
		return out, bad(f+".max_age", s.MaxAge, "outside 1s..1h")
	}
	if s.MaxBytes != 0 && (s.MaxBytes < 1<<20 || s.MaxBytes > 64<<30) {
		return out, bad(f+".max_bytes", s.MaxBytes, "outside 1048576..68719476736 (1 MiB..64 GiB)")
	}
	if s.Replicas < 0 || s.Replicas > 5 {
		return out, bad(f+".replicas", s.Replicas, "outside 1..5")
	}
	maxAge := s.MaxAge
	if maxAge == 0 {
		maxAge = 30 * time.Second
	}
	if s.Replay < 0 || s.Replay > maxAge {
		return out, bad(f+".replay", s.Replay, fmt.Sprintf("outside 0..max_age (%v)", maxAge))
	}
	groups, err := c.DetectHostGroups()
	if err != nil {
		return out, err
	}
	pt := scaleout.Partitioner{N: n, Groups: groups}
	stream := scaleout.StreamConfig{Name: s.Stream, Subject: s.Subject, MaxAge: s.MaxAge, MaxBytes: s.MaxBytes, Replicas: s.Replicas}
	switch s.Role {
	case ScaleoutCollector:
		if s.Owned != "" {
			return out, bad(f+".owned", s.Owned, "is for detectors: a collector publishes every partition")
		}
		if s.Replay != 0 {
			return out, bad(f+".replay", s.Replay, "is for detectors: a collector reads nothing back")
		}
		out.Publisher = scaleout.PublisherConfig{Name: out.Name, Partitioner: pt, Stream: stream}
	case ScaleoutDetector:
		owned, err := scaleout.ParseOwned(s.Owned, n)
		if err != nil {
			return out, bad(f+".owned", s.Owned, err.Error())
		}
		out.Detector = scaleout.DetectorConfig{Partitioner: pt, Stream: stream, Owned: owned, Replay: s.Replay}
	}
	return out, nil
}

// validateNetworkRole checks what role network needs: network mode on,
// and nothing that only a data plane would use.
func (c *Config) validateNetworkRole() error {
	if !c.Telemetry.Enabled {
		return bad("telemetry.enabled", false, "must be true with role network: network mode is all it runs")
	}
	if strings.TrimSpace(c.Interface) != "" {
		return bad("interface", c.Interface, "is for roles mitigation and probe: role network attaches nothing (remove it)")
	}
	if c.Hardware.Backend != "none" {
		return bad("hardware.backend", c.Hardware.Backend, "must be none with role network: it has no data plane")
	}
	return nil
}

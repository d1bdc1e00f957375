// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
)

// idleDP is a data plane with no traffic and no rules.
type idleDP struct{}

func (idleDP) Drain(sink datapath.FlowSink) (*datapath.Snapshot, error) {
	now := time.Now()
	return (&datapath.Snapshot{Start: now.Add(-time.Second), End: now}).Emit(sink), nil
}
func (idleDP) Block(...netip.Prefix) error                               { return nil }
func (idleDP) Unblock(...netip.Prefix) error                             { return nil }
func (idleDP) Allow(...netip.Prefix) error                               { return nil }
func (idleDP) Disallow(...netip.Prefix) error                            { return nil }
func (idleDP) Blocked() ([]datapath.Rule, error)                         { return nil, nil }
func (idleDP) Allowed() ([]datapath.Rule, error)                         { return nil, nil }
func (idleDP) RuleCountersInto([]netip.Prefix, []datapath.Reading) error { return nil }
func (idleDP) Stats() (*datapath.Stats, error)                           { return &datapath.Stats{}, nil }
func (idleDP) Check() error                                              { return nil }
func (idleDP) Close() error                                              { return nil }

// TestAttacksAPI: the log's attacks are listed, shown and their pcap
// served through the API and the client; unknown IDs and attacks without
// a pcap are 404s.
func TestAttacksAPI(t *testing.T) {
	cfg := config.Default()
	cfg.Interface, cfg.API.Socket, cfg.Interval = "fake0", "", 100*time.Millisecond
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	lg, err := alert.OpenLog(filepath.Dir(cfg.StateFile), 0)
	if err != nil {
		t.Fatal(err)
	}
	pcap, err := lg.WritePackets("a1", []alert.Packet{{Time: time.Now(), Len: 3, Data: []byte{1, 2, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	for _, r := range []alert.Report{
		{ID: "a1", Event: alert.EventEnd, Victim: netip.MustParseAddr("192.0.2.1"), Started: t0, Ended: t0.Add(time.Second), Packets: 1, Pcap: pcap},
		{ID: "a2", Event: alert.EventEnd, Started: t0, Ended: t0.Add(time.Second)},
	} {
		if err := lg.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	d, err := daemon.NewOver(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), idleDP{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	c, err := Dial(unixServer(t, (&Server{D: d}).Handler()))
	if err != nil {
		t.Fatal(err)
	}

	rs, err := c.Attacks(ctx)
	if err != nil || len(rs) != 2 || rs[0].ID != "a1" || rs[1].ID != "a2" {
		t.Fatalf("attacks %+v %v", rs, err)
	}
	r, err := c.Attack(ctx, "a1")
	if err != nil || r.Victim != netip.MustParseAddr("192.0.2.1") || r.Packets != 1 {
		t.Fatalf("attack a1 %+v %v", r, err)
	}
	var buf bytes.Buffer
	if err := c.AttackPcap(ctx, "a1", &buf); err != nil || buf.Len() != 24+16+3 {
		t.Fatalf("pcap: %d bytes, %v", buf.Len(), err)
	}
	for _, id := range []string{"nope", "a2", "..%2f..%2fetc"} {
		var se *StatusError
		if _, err := c.Attack(ctx, id); id != "a2" && (!errors.As(err, &se) || se.Code != http.StatusNotFound) {
			t.Errorf("attack %q: %v, want 404", id, err)
		}
		if err := c.AttackPcap(ctx, id, io.Discard); !errors.As(err, &se) || se.Code != http.StatusNotFound {
			t.Errorf("pcap of %q: %v, want 404", id, err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/testutil"
)

// TestServerRestart: a standalone nats-server forgets a memory stream
// when it restarts; the collectors create it again and the detectors'
// consumers resume, with nothing restarted on tierwall's side.
func TestServerRestart(t *testing.T) {
	testutil.RequireCommand(t, "nats-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	dir := t.TempDir()
	run := func() *exec.Cmd {
		cmd := exec.Command("nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
				c.Close()
				return cmd
			}
			if i == 400 {
				t.Fatal("nats-server did not listen")
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	stop := func(cmd *exec.Cmd) { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	srv := run()
	defer func() { stop(srv) }()
	connect := func() *nats.Conn {
		nc, err := Connect("nats://127.0.0.1:"+port, t.Name(), Auth{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := context.Background()
	cfg := telemetry.DetectorConfig{}
	stream := StreamConfig{Name: "RESTART", Subject: "restart"}
	cons, err := Consume(ctx, connect(), DetectorConfig{Stream: stream, Replay: -1}, telemetry.NewDetector(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	pub, err := NewPublisher(ctx, connect(), PublisherConfig{Name: "c", Stream: stream}, nil)
	if err != nil {
		t.Fatal(err)
	}
	part := telemetry.NewPartial(cfg, pub.Emit)
	now := time.Now()
	// feedUntil sends a record a tick until the detector has more than n
	// aggregates.
	feedUntil := func(n uint64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for cons.Stats().Aggregates <= n {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %d aggregates merged; publisher %+v", within, cons.Stats().Aggregates, pub.Stats())
			}
			part.Add(now, []telemetry.Record{{Dst: netip.MustParseAddr("198.51.100.7"), Packets: 1, Bytes: 100, Rate: 1, IPProto: 17}})
			now = now.Add(100 * time.Millisecond)
			part.Flush(now)
			time.Sleep(100 * time.Millisecond)
		}
	}
	feedUntil(0, 10*time.Second)
	stop(srv)
	before := cons.Stats().Aggregates
	srv = run()
	feedUntil(before, 30*time.Second)
	t.Logf("resumed: %d aggregates before the restart, %d after; publisher %+v", before, cons.Stats().Aggregates, pub.Stats())
}

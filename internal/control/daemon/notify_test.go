// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Under systemd (Type=notify) the daemon says READY=1 when Run starts
// (New has attached the filter, and the API listens before Run), sends
// WATCHDOG=1 from its loop every half WatchdogSec whatever the interval,
// and STOPPING=1 when asked to stop.
func TestRunNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "40000") // every 20ms
	t.Setenv("WATCHDOG_PID", "")
	cfg := testConfig(t)
	cfg.Interval = time.Minute // the watchdog must not wait for an interval
	h := newHarness(t, cfg, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.d.Run(ctx, nil) }()

	next := func() string {
		t.Helper()
		buf := make([]byte, 64)
		_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := l.Read(buf)
		if err != nil {
			cancel()
			t.Fatalf("waiting for a notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := next(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	for range 3 {
		if got := next(); got != "WATCHDOG=1" {
			t.Fatalf("notification %q, want WATCHDOG=1", got)
		}
	}
	cancel()
	for {
		got := next()
		if got == "STOPPING=1" {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping, want STOPPING=1", got)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen opens a notification socket the way systemd does and points
// NOTIFY_SOCKET at it.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return l
}

func receive(t *testing.T, l *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 256)
	_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := l.Read(buf)
	if err != nil {
		t.Fatalf("reading the notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotifySendsToTheSocket(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@tierwall-sdnotify-test-%d", os.Getpid()), // abstract, as systemd passes it
	} {
		l := listen(t, name)
		for _, s := range []string{Ready, Watchdog, Stopping} {
			sent, err := Notify(s)
			if err != nil || !sent {
				t.Fatalf("%s: Notify(%s) = %v, %v", name, s, sent, err)
			}
			if got := receive(t, l); got != s {
				t.Fatalf("%s: received %q, want %q", name, got, s)
			}
		}
	}
}

func TestNotifyOutsideSystemdIsANoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("Notify without NOTIFY_SOCKET = %v, %v; want false, nil", sent, err)
	}
}

func TestNotifyReportsAnUnreachableSocket(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "gone"), "relative/path"} {
		t.Setenv("NOTIFY_SOCKET", name)
		if sent, err := Notify(Ready); sent || err == nil {
			t.Fatalf("NOTIFY_SOCKET=%s: Notify = %v, %v; want an error", name, sent, err)
		}
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0},
		{"30000000", "", 15 * time.Second},
		{"30000000", self, 15 * time.Second},
		{"30000000", "1", 0}, // another process's watchdog
		{"0", "", 0},
		{"-5", "", 0},
		{"soon", "", 0},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		if got := WatchdogInterval(); got != c.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}

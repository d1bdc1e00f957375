// SPDX-License-Identifier: Apache-2.0

// Package sdnotify tells systemd how the daemon is doing (sd_notify(3)),
// for the unit's Type=notify: READY=1 once the filter is attached and the
// API listens, so that units ordered after tierwall start against a host
// that is already protected; WATCHDOG=1 from the control loop, so that a
// wedged loop is restarted rather than left holding stale bans; STOPPING=1
// on shutdown. The protocol is one datagram on the unix socket named by
// $NOTIFY_SOCKET: a few lines here rather than a new module
// (github.com/coreos/go-systemd/v22/daemon does the same and more). Outside
// systemd every call is a no-op.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// States the daemon sends.
const (
	Ready    = "READY=1"
	Watchdog = "WATCHDOG=1"
	Stopping = "STOPPING=1"
)

// Notify sends state to the service manager. It reports false, and no
// error, when the process was not started with a notification socket.
func Notify(state string) (bool, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false, nil
	}
	// A leading '@' names an abstract socket; Go's unix addresses take it
	// as such. Anything else must be a path (systemd ≥ 254 may also pass
	// vsock: addresses, for VMs; tierwall runs on the host).
	if path[0] != '@' && path[0] != '/' {
		return false, fmt.Errorf("notifying systemd: unsupported NOTIFY_SOCKET %q", path)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notifying systemd: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notifying systemd of %s: %w", state, err)
	}
	return true, nil
}

// WatchdogInterval is how often to send Watchdog: half of the unit's
// WatchdogSec (sd_watchdog_enabled(3)), so that one late send is not a
// restart. Zero means the watchdog is off, or meant for another process
// (WATCHDOG_PID names the main process; a child must not answer for it).
func WatchdogInterval() time.Duration {
	usec, err := strconv.ParseUint(os.Getenv("WATCHDOG_USEC"), 10, 63)
	if err != nil || usec == 0 {
		return 0
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}

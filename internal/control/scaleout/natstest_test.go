// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/testutil"
)

// startNATS runs Debian's nats-server with JetStream on a free loopback
// port, its store in a temporary directory, for the test's life.
func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	testutil.RequireCommand(t, "nats-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nats-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			t.Cleanup(nc.Close)
			return nc
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

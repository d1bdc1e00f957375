// SPDX-License-Identifier: Apache-2.0

// Package natstest runs a real nats-server (Debian's) with JetStream for
// tests of the scale-out roles: the bus they run on in production, not a
// fake of it.
package natstest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/testutil"
)

// Start runs nats-server with JetStream on a free loopback port, its store
// in a temporary directory, for the test's life, and returns its URL once
// it answers. Without the binary the test is skipped, but fails under
// CI=true.
func Start(t testing.TB) string {
	t.Helper()
	url, logf := start(t)
	waitFor(t, url, logf, func() error {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
		}
		return err
	})
	return url
}

// StartTLS is Start with TLS that verifies its clients: the server's
// certificate and key, and the CA its clients' certificates must chain
// to (PEM files). It returns once the port accepts connections.
func StartTLS(t testing.TB, cert, key, clientCA string) string {
	t.Helper()
	return startListening(t, "--tls", "--tlscert", cert, "--tlskey", key, "--tlsverify", "--tlscacert", clientCA)
}

// StartConfig is Start with a configuration file (-c), for what the
// command line cannot say (operator mode's JWTs and resolver). It
// returns once the port accepts connections: whether a client may
// connect is the test's question.
func StartConfig(t testing.TB, conf string) string {
	t.Helper()
	return startListening(t, "-c", conf)
}

// startListening starts the server with args and waits for its port
// alone: a client would need what the test is about.
func startListening(t testing.TB, args ...string) string {
	t.Helper()
	url, logf := start(t, args...)
	waitFor(t, url, logf, func() error {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
		if err == nil {
			c.Close()
		}
		return err
	})
	return url
}

func start(t testing.TB, args ...string) (url, logf string) {
	testutil.RequireCommand(t, "nats-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	// Its log, for the failure message of a server that never answers.
	logf = filepath.Join(dir, "nats-server.log")
	cmd := exec.Command("nats-server", append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir, "-l", logf}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nats-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "nats://127.0.0.1:" + strconv.Itoa(port), logf
}

func waitFor(t testing.TB, url, logf string, ready func() error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf)
			t.Fatalf("nats-server on %s: %v; its log:\n%s", url, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

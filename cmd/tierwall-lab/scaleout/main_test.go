// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/testutil"
)

// TestCollectAndDetect runs the two commands as an operator would, with a
// nats-server between them: a flood sent to the collector is printed by
// the detector.
func TestCollectAndDetect(t *testing.T) {
	testutil.RequireCommand(t, "nats-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(natsPort), "-js", "-sd", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(natsPort))
		if err == nil {
			c.Close()
			break
		}
		if i == 200 {
			t.Fatalf("nats-server: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	udp := u.LocalAddr().(*net.UDPAddr).AddrPort()
	u.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tierwall.yaml")
	conf := "interface: lo\nhostgroups:\n  - {name: none, prefixes: [198.18.63.0/24]}\n" +
		"telemetry:\n  enabled: true\n  mode: monitor\n  listen: [\"" + udp.String() + "\"]\n  exporters:\n    - {address: 127.0.0.1, name: r}\n" +
		"  networks: [198.51.100.0/24]\n  thresholds:\n    all: {pps: 50000}\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	// The detector's JSON lines go to a pipe standing in for its stdout.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for _, args := range [][]string{
		{"detect", "--config", cfg, "--nats", url, "--partitions", "4", "--owned", "0-3"},
		{"collect", "--config", cfg, "--nats", url, "--partitions", "4", "--name", "c1"},
	} {
		root := newRoot()
		root.SetArgs(args)
		go func() { done <- root.ExecuteContext(ctx) }()
	}
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	time.Sleep(500 * time.Millisecond) // both connected and listening
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(udp))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	victim := netip.MustParseAddr("198.51.100.7")
	deadline := time.After(10 * time.Second)
	for i := 1; ; i++ {
		// 300 kpps at 1:1000, in datagrams of six samples.
		s := telemetrytest.SFlow{Agent: netip.MustParseAddr("127.0.0.1"), Sequence: uint32(i)}
		for range 6 {
			s.Flow(1000, telemetrytest.Packet{Src: netip.MustParseAddr("192.0.2.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
		}
		if _, err := conn.Write(s.Bytes()); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-lines:
			if strings.Contains(l, `"started"`) && strings.Contains(l, victim.String()) {
				t.Logf("detector: %s", l)
				cancel()
				for range 2 {
					if err := <-done; err != nil {
						t.Errorf("command: %v", err)
					}
				}
				return
			}
			t.Logf("detector: %s", l)
		case err := <-done:
			t.Fatalf("a command ended: %v", err)
		case <-deadline:
			t.Fatal("the detector printed no attack")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

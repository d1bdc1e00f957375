// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// samples are two readings one second apart: XDP dropped 2000 and
// passed 500 packets of 100 bytes, the NIC dropped 10000 of 60.
func samples(talkers int) (*sample, *sample) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	mk := func(at time.Time, k uint64) *sample {
		s := &sample{at: at, status: apiv1.Status{Interface: "eth0", Bans: 3, Breaker: true},
			tiers: apiv1.Tiers{
				XDP: &datapath.Stats{Verdicts: map[string]datapath.Counter{
					"drop_exact":  {Packets: 1500 * k, Bytes: 150000 * k},
					"drop_prefix": {Packets: 500 * k, Bytes: 50000 * k},
					"pass":        {Packets: 500 * k, Bytes: 50000 * k},
				}},
				Hardware: &apiv1.HWTier{Backend: "emulated", Iface: "wire0", Capacity: 4, Occupancy: 2,
					Verdicts: map[string]tier.Counters{"hit_drop": {Packets: 10000 * k, Bytes: 600000 * k}, "miss": {Packets: 99 * k}}},
			}}
		for i := range talkers {
			s.top = append(s.top, detect.Talker{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), PPS: 1234.5, BPS: 1e6, Dests: 1})
		}
		return s
	}
	return mk(t0, 1), mk(t0.Add(time.Second), 2)
}

func TestWatchFrame(t *testing.T) {
	prev, cur := samples(50)
	lines := frame(prev, cur, 100, 30)
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"arriving                12.5k      6.80M", // 2000+500+10000 pps; (200k+50k)*8 + 600k*8 bits
		"dropped in NIC          10.0k      4.80M",
		"dropped in XDP           2.0k      1.60M",
		"passed                    500     400.0k",
		"drop_exact 1.5k, drop_prefix 500",
		"bans 3  CIRCUIT BREAKER OPEN",
		"2/4 rules [##########..........]",
		"198.51.100.0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("frame lacks %q:\n%s", want, text)
		}
	}
	if len(lines) != 30 {
		t.Errorf("%d lines for a 30-line terminal and 50 talkers", len(lines))
	}
}

// However small the terminal, the frame fits it.
func TestWatchFrameFits(t *testing.T) {
	prev, cur := samples(50)
	for _, sz := range [][2]int{{100, 30}, {80, 24}, {60, 10}, {40, 12}, {20, 5}, {10, 1}} {
		lines := frame(prev, cur, sz[0], sz[1])
		if len(lines) > sz[1] {
			t.Errorf("%dx%d: %d lines", sz[0], sz[1], len(lines))
		}
		for _, l := range lines {
			if len(l) > sz[0] {
				t.Errorf("%dx%d: line of %d columns: %q", sz[0], sz[1], len(l), l)
			}
		}
	}
}

// A long IPv6 source stays whole at 80 columns: the columns that give
// way are the counts, not the address.
func TestWatchFrameIPv6(t *testing.T) {
	prev, cur := samples(1)
	src := netip.MustParseAddr("2001:db8:1234:5678:9abc:def0:1234:5678")
	cur.top[0].Src = src
	lines := frame(prev, cur, 80, 24)
	text := strings.Join(lines, "\n")
	if !strings.Contains(text, src.String()+" ") {
		t.Errorf("address cut at 80 columns:\n%s", text)
	}
	for _, l := range lines {
		if len(l) > 80 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
}

// fakeDaemon answers the three GETs watch reads, its counters growing
// with every reading.
func fakeDaemon(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var k uint64
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		reply(w, apiv1.Status{Interface: "eth9", Bans: 7})
	})
	mux.HandleFunc("GET /v1/tiers", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		k++
		n := k
		mu.Unlock()
		reply(w, apiv1.Tiers{XDP: &datapath.Stats{Verdicts: map[string]datapath.Counter{"drop_exact": {Packets: 1000 * n, Bytes: 64000 * n}}}})
	})
	mux.HandleFunc("GET /v1/top", func(w http.ResponseWriter, r *http.Request) {
		reply(w, []detect.Talker{{Src: netip.MustParseAddr("203.0.113.9"), PPS: 42}})
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })
	return sock
}

// --once prints one frame of a running daemon and exits.
func TestWatchOnce(t *testing.T) {
	sock := fakeDaemon(t)
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--socket", sock, "watch", "--once", "--every", "100ms"})
	t.Setenv("COLUMNS", "90")
	t.Setenv("LINES", "20")
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"tierwall watch  eth9", "bans 7", "hardware: none (XDP only)", "203.0.113.9", "dropped in XDP"} {
		if !strings.Contains(text, want) {
			t.Errorf("frame lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b[") {
		t.Error("--once cleared the screen")
	}
}

func TestWatchBadInput(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"--socket", fakeDaemon(t), "watch", "--every", "1ms"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if err := root.Execute(); !errors.Is(err, rule.ErrInvalid) || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--every 1ms: %v", err)
	}
	root = newRoot()
	root.SetArgs([]string{"--socket", filepath.Join(t.TempDir(), "none.sock"), "watch", "--once"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if err := root.Execute(); err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "comes from the daemon (tierwall run)") {
		t.Errorf("no daemon: %v", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/datapath"
)

// fakeAPI serves a few read endpoints on a unix socket in a temporary
// directory, as a daemon (probe false) or a probe would, and returns the
// socket's path.
func fakeAPI(t *testing.T, probe bool) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	reply := func(pattern string, v any) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	if probe {
		reply("GET /v1/flows/status", probed.Status{Mode: "offload"})
		reply("GET /v1/flows/top", []any{})
	} else {
		reply("GET /v1/tiers", apiv1.Tiers{XDP: &datapath.Stats{Interface: "eth9", Mode: "native"}})
		reply("GET /v1/attacks", []any{})
		reply("GET /v1/victims", map[string]any{"enabled": false})
		reply("GET /v1/flowrules", []any{})
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// emptyBPFFS is a pin root with nothing attached, so that what this
// machine has attached does not decide the test.
func emptyBPFFS(t *testing.T) string { return t.TempDir() }

// Every command that talks to a daemon finds it the same way: --socket
// reached attacks and watch but stats ignored it (and said "not
// attached" of a probe).
func TestDaemonFoundOnSocket(t *testing.T) {
	sock, probeSock := fakeAPI(t, false), fakeAPI(t, true)
	for _, args := range [][]string{
		{"--socket", sock, "attacks", "list"},
		{"--socket", sock, "stats"},
		{"--socket", sock, "stats", "--json"},
		{"--socket", probeSock, "stats"},
		{"--socket", probeSock, "flows"},
		{"--socket", sock, "victims"},
		{"--socket", sock, "flowrule", "list"},
	} {
		if _, err := execute(append([]string{"--bpffs", emptyBPFFS(t)}, args...)...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// With no daemon, every command that needs one says so the same way:
// exit 2, naming the socket it tried.
func TestNoDaemonSameError(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"attacks", "list"}, {"attacks", "show", "x"}, {"watch", "--once"}, {"flows"}, {"flows", "--status"},
		{"provisional"}, {"bgp", "neighbors"}, {"stats"},
		{"victims"}, {"flowrule", "list"}, {"flowrule", "add", "dst", "198.51.100.7/32", "drop"},
		{"flowrule", "del", "dst", "198.51.100.7/32", "drop"}, {"--direct", "victims"},
	} {
		_, err := execute(append([]string{"--bpffs", emptyBPFFS(t), "--socket", none}, args...)...)
		if err == nil || cli.ExitCode(err) != cli.ExitUsage || !errors.Is(err, api.ErrNoDaemon) ||
			!strings.Contains(err.Error(), "none answers at "+none+" (give its API socket with --socket, or its TCP API with --url and --token-file)") {
			t.Errorf("%v: %v (exit %d), want exit 2 naming %s", args, err, cli.ExitCode(err), none)
		}
	}
}

// The daemon that owns the data plane in this namespace is found from its
// owner record, whatever --socket says: `tierwall -n NS attacks` found no
// daemon that `tierwall -n NS block list` reached.
func TestDaemonFoundFromOwnerRecord(t *testing.T) {
	if err := os.MkdirAll(bpffs.RunDir, 0o755); err != nil {
		t.Skipf("cannot publish an owner record in %s: %v", bpffs.RunDir, err)
	}
	root := emptyBPFFS(t)
	const iface = "tw34own0"
	if err := os.MkdirAll(bpffs.FilterDir(root, iface), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := fakeAPI(t, false)
	own, err := daemon.Own(bpffs.RunDir, daemon.OwnerKey(root, iface), daemon.Owner{Interface: iface, Socket: sock})
	if err != nil {
		t.Skipf("cannot publish an owner record: %v", err)
	}
	t.Cleanup(own.Release)
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"attacks", "list"}, {"stats", "--socket", none}, {"victims"}, {"flowrule", "list"}} {
		if _, err := execute(append([]string{"--bpffs", root, "--socket", none}, args...)...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/datapath"
)

// remoteAPI is a daemon's TCP API with a bearer token (api.tcp,
// api.token_file): it answers the requests the CLI makes and records
// them.
type remoteAPI struct {
	url, tokenFile string
	mu             sync.Mutex
	reqs           []string
	bodies         []map[string]any
}

func newRemoteAPI(t *testing.T) *remoteAPI {
	t.Helper()
	ra := &remoteAPI{tokenFile: filepath.Join(t.TempDir(), "token")}
	if err := os.WriteFile(ra.tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	reply := func(pattern string, v any) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			ra.mu.Lock()
			ra.reqs = append(ra.reqs, r.Method+" "+r.URL.Path)
			ra.bodies = append(ra.bodies, body)
			ra.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	reply("GET /v1/tiers", apiv1.Tiers{XDP: &datapath.Stats{Interface: "eth9", Mode: "native"}})
	reply("GET /v1/attacks", []any{})
	reply("GET /v1/victims", map[string]any{"enabled": false})
	reply("GET /v1/flowrules", []any{})
	reply("GET /v1/top", []any{})
	reply("GET /v1/rules", []any{})
	reply("GET /v1/provisional", map[string]any{})
	reply("POST /v1/rules/delete", apiv1.UnbanResult{Prefixes: 2})
	reply("POST /v1/rules/batch", apiv1.BatchResult{Prefixes: 2, New: 2})
	reply("POST /v1/allowlist/batch", apiv1.UnbanResult{Prefixes: 2})
	srv := httptest.NewServer((&api.Server{Token: "s3cret"}).Authenticated(mux))
	t.Cleanup(srv.Close)
	ra.url = srv.URL
	return ra
}

func (ra *remoteAPI) took() ([]string, []map[string]any) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	r, b := ra.reqs, ra.bodies
	ra.reqs, ra.bodies = nil, nil
	return r, b
}

// Every command that asks a daemon asks the one at --url, with the token
// of --token-file, whatever is attached here or --socket says (as gobgp's
// CLI reaches gobgpd); there was no way to reach a daemon over TCP.
func TestRemoteDaemonOverTCP(t *testing.T) {
	ra := newRemoteAPI(t)
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attacks", "list"}, "GET /v1/attacks"},
		{[]string{"stats"}, "GET /v1/tiers"},
		{[]string{"victims"}, "GET /v1/victims"},
		{[]string{"flowrule", "list"}, "GET /v1/flowrules"},
		{[]string{"top"}, "GET /v1/top"},
		{[]string{"provisional"}, "GET /v1/provisional"},
		{[]string{"block", "list"}, "GET /v1/rules"},
		{[]string{"block", "add", "198.51.100.1", "198.51.100.2"}, "POST /v1/rules/batch"},
		{[]string{"block", "del", "198.51.100.1", "198.51.100.2"}, "POST /v1/rules/delete"},
		{[]string{"allow", "del", "198.51.100.0/24", "203.0.113.0/24"}, "POST /v1/allowlist/batch"},
	} {
		args := append([]string{"--bpffs", emptyBPFFS(t), "--socket", none, "--url", ra.url, "--token-file", ra.tokenFile}, tc.args...)
		if _, err := execute(args...); err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		if reqs, _ := ra.took(); len(reqs) == 0 || reqs[len(reqs)-1] != tc.want {
			t.Errorf("%v: requests %v, want %s", tc.args, reqs, tc.want)
		}
	}
	// A wrong token is the caller's mistake, and so is --direct with
	// --url; nothing listening is "no daemon", exit 2.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := execute("--bpffs", emptyBPFFS(t), "--url", ra.url, "--token-file", bad, "attacks", "list"); err == nil ||
		cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v (exit %d)", err, cli.ExitCode(err))
	}
	if _, err := execute("--bpffs", emptyBPFFS(t), "--url", ra.url, "--direct", "block", "del", "198.51.100.1"); err == nil || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--direct with --url: %v", err)
	}
	if _, err := execute("--bpffs", emptyBPFFS(t), "--url", "http://127.0.0.1:1", "victims"); !errors.Is(err, api.ErrNoDaemon) || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("nothing at --url: %v (exit %d)", err, cli.ExitCode(err))
	}
}

// block flush lifts every ban in one request, and only when told to: it
// refuses without --yes when stdin is not a terminal.
func TestBlockFlushAsks(t *testing.T) {
	ra := newRemoteAPI(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = old; r.Close() })
	base := []string{"--bpffs", emptyBPFFS(t), "--url", ra.url, "--token-file", ra.tokenFile, "block", "flush"}
	_, err = execute(base...)
	if err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("flush without --yes, stdin a pipe: %v (exit %d)", err, cli.ExitCode(err))
	}
	reqs, _ := ra.took()
	for _, q := range reqs {
		if strings.HasPrefix(q, "POST") {
			t.Errorf("flush refused, yet it sent %s", q)
		}
	}
	if _, err := execute(append(base, "--yes")...); err != nil {
		t.Fatal(err)
	}
	reqs, bodies := ra.took()
	if n := len(reqs); n == 0 || reqs[n-1] != "POST /v1/rules/delete" || bodies[n-1]["all"] != true {
		t.Errorf("flush --yes: %v %v", reqs, bodies)
	}
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, "\n": false, "no\n": false, "": false} {
		var out bytes.Buffer
		if got, err := confirm(strings.NewReader(in), &out, "sure? "); err != nil || got != want || out.String() != "sure? " {
			t.Errorf("confirm(%q): %v %v %q", in, got, err, out.String())
		}
	}
}

// A change that takes seconds says so (on a terminal); one that ends
// before progressAfter prints nothing.
func TestProgress(t *testing.T) {
	old := progressAfter
	progressAfter = 20 * time.Millisecond
	t.Cleanup(func() { progressAfter = old })
	var b bytes.Buffer
	stop := progressTo(&b, "block del: 3 rule(s)")
	time.Sleep(60 * time.Millisecond)
	stop()
	stop()
	if !strings.Contains(b.String(), "tierwall: block del: 3 rule(s)…") || !strings.HasSuffix(b.String(), "\r\033[K") {
		t.Errorf("progress wrote %q", b.String())
	}
	b.Reset()
	progressAfter = time.Hour
	progressTo(&b, "quick")()
	if b.Len() != 0 {
		t.Errorf("a quick change wrote %q", b.String())
	}
}

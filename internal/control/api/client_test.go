// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/rule"
)

// unixServer serves h on a unix socket in a temporary directory.
func unixServer(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
	})
	return sock
}

func TestClientStatusErrors(t *testing.T) {
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "rules") {
			writeJSON(w, http.StatusBadRequest, apiv1.ErrorBody{Error: "prefix: bad"})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, apiv1.ErrorBody{Error: "busy"})
	}))
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Rules(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || se.Message != "prefix: bad" || !errors.Is(err, rule.ErrInvalid) {
		t.Fatalf("4xx: %v", err)
	}
	_, err = c.Status(context.Background())
	if !errors.As(err, &se) || se.Code != 503 || errors.Is(err, rule.ErrInvalid) {
		t.Fatalf("5xx must not read as the caller's mistake: %v", err)
	}
	if _, err := Dial(filepath.Join(t.TempDir(), "none.sock")); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("no daemon: %v", err)
	}
}

// Change is all or nothing in the daemon: every change of many prefixes
// is one request the daemon checks whole before it changes anything. (It
// sent one request per prefix and undid by sending the opposite, which
// re-added a deleted ban as a permanent operator ban.)
func TestClientChangesInOneRequest(t *testing.T) {
	var paths []string
	var bodies []map[string]any
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		bodies = append(bodies, body)
		writeJSON(w, http.StatusOK, map[string]int{"prefixes": 3})
	}))
	c := NewClient(sock)
	ps := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32"), netip.MustParsePrefix("192.0.2.3/32")}
	for _, tc := range []struct {
		kind  string
		add   bool
		path  string
		field string
	}{
		{Allow, true, "POST /v1/allowlist/batch", ""},
		{Allow, false, "POST /v1/allowlist/batch", "delete"},
		{Block, false, "POST /v1/rules/delete", ""},
	} {
		paths, bodies = nil, nil
		if err := c.Change(context.Background(), tc.kind, ps, tc.add, ""); err != nil {
			t.Fatalf("%s add=%v: %v", tc.kind, tc.add, err)
		}
		if len(paths) != 1 || paths[0] != tc.path || len(bodies[0]["prefixes"].([]any)) != 3 || (tc.field != "" && bodies[0][tc.field] != true) {
			t.Errorf("%s add=%v: requests %v %v, want one %s", tc.kind, tc.add, paths, bodies, tc.path)
		}
	}
}

// Many bans travel as one batch request.
func TestClientBlocksInOneBatch(t *testing.T) {
	var got []apiv1.BatchRequest
	var paths []string
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		var req apiv1.BatchRequest
		if err := (&Server{}).decodeLimit(w, r, &req, 1<<20); err != nil {
			writeJSON(w, http.StatusBadRequest, apiv1.ErrorBody{Error: err.Error()})
			return
		}
		got = append(got, req)
		writeJSON(w, http.StatusCreated, apiv1.BatchResult{Prefixes: len(req.Prefixes), New: len(req.Prefixes)})
	}))
	var ps []netip.Prefix
	for i := 0; i < 1000; i++ {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 32))
	}
	if err := NewClient(sock).Change(context.Background(), Block, ps, true, "feed"); err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || paths[0] != "POST /v1/rules/batch" || len(got[0].Prefixes) != 1000 || got[0].Reason != "feed" {
		t.Fatalf("requests %v", paths)
	}
}

// A TCP listener configured without a token refuses everyone, also a
// request carrying an empty bearer token.
func TestAuthenticatedEmptyTokenRefusesAll(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, tc := range []struct {
		token, header string
		want          int
	}{
		{"", "", 401}, {"", "Bearer ", 401}, {"", "Bearer x", 401},
		{"s3cret", "Bearer s3cret", 200}, {"s3cret", "Bearer s3cre", 401}, {"s3cret", "s3cret", 401},
	} {
		h := (&Server{Token: tc.token}).Authenticated(ok)
		req := httptest.NewRequest("GET", "/v1/status", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("token %q, header %q: %d, want %d", tc.token, tc.header, rec.Code, tc.want)
		}
	}
}

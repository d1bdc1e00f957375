// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
			writeJSON(w, http.StatusBadRequest, ErrorBody{"prefix: bad"})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{"busy"})
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

// Change is all or nothing: for the allowlist (one request per prefix) a
// refusal undoes what was applied before it.
func TestClientChangeUndoes(t *testing.T) {
	var mu sync.Mutex
	allowed := map[string]bool{}
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case "POST":
			var req AllowRequest
			if err := (&Server{MaxBody: 1 << 10}).decode(w, r, &req); err != nil {
				t.Errorf("decoding the client's request: %v", err)
				writeJSON(w, http.StatusBadRequest, ErrorBody{err.Error()})
				return
			}
			if req.Prefix == "192.0.2.3/32" {
				writeJSON(w, http.StatusBadRequest, ErrorBody{"refused"})
				return
			}
			allowed[req.Prefix] = true
			writeJSON(w, http.StatusCreated, map[string]string{"prefix": req.Prefix})
		case "DELETE":
			delete(allowed, strings.Replace(strings.TrimPrefix(r.URL.Path, "/v1/allowlist/"), "_", "/", 1))
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	c := NewClient(sock)
	ps := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32"), netip.MustParsePrefix("192.0.2.3/32")}
	err := c.Change(context.Background(), Allow, ps, true, "")
	if err == nil || !strings.Contains(err.Error(), "nothing changed") || !errors.Is(err, rule.ErrInvalid) {
		t.Fatalf("change: %v", err)
	}
	if len(allowed) != 0 {
		t.Fatalf("left applied after the refusal: %v", allowed)
	}
	if err := c.Change(context.Background(), Allow, ps[:2], true, ""); err != nil || len(allowed) != 2 {
		t.Fatalf("change of good prefixes: %v, %v", err, allowed)
	}
}

// Many bans travel as one batch request.
func TestClientBlocksInOneBatch(t *testing.T) {
	var got []BatchRequest
	var paths []string
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		var req BatchRequest
		if err := (&Server{}).decodeLimit(w, r, &req, 1<<20); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorBody{err.Error()})
			return
		}
		got = append(got, req)
		writeJSON(w, http.StatusCreated, BatchResponse{Prefixes: len(req.Prefixes), New: len(req.Prefixes)})
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

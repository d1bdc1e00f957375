// SPDX-License-Identifier: Apache-2.0

package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The metrics listener serves /metrics and /healthz without a token and
// nothing of the API: no state read, nothing changed.
func TestMetricsListenerIsReadOnly(t *testing.T) {
	d, _, _ := testDaemon(t)
	srv := httptest.NewServer((&Server{D: d, Token: "0123456789abcdef"}).MetricsHandler())
	defer srv.Close()
	code, h, b := call(t, "GET", srv.URL+"/metrics")
	if code != http.StatusOK || !strings.Contains(string(b), "tierwall_build_info") || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /metrics: %d %s", code, h.Get("Content-Type"))
	}
	if code, _, b := call(t, "GET", srv.URL+"/healthz"); code != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("GET /healthz: %d %q", code, b)
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "/v1/rules"}, {"GET", "/v1/status"}, {"GET", "/v1/config"}, {"DELETE", "/v1/rules/192.0.2.1"},
		{"POST", "/metrics"}, {"GET", "/v1/openapi.json"},
	} {
		if code, _, _ := call(t, r.method, srv.URL+r.path); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s on the metrics listener: %d, want 404 or 405", r.method, r.path, code)
		}
	}
}

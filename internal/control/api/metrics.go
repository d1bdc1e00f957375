// SPDX-License-Identifier: Apache-2.0

package api

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler is the read-only metrics listener (metrics.listen):
// GET /metrics and GET /healthz, nothing else, and no token, so that a
// central Prometheus scrapes without the API's write token. Nothing it
// serves changes state or shows more than /metrics does.
func (s *Server) MetricsHandler() http.Handler {
	var reg *prometheus.Registry
	if s.D != nil {
		reg = s.D.Metrics.Registry
	} else {
		reg = s.P.Metrics
	}
	m := newMux()
	m.hint = "this listener serves GET /metrics and GET /healthz only"
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	return m
}

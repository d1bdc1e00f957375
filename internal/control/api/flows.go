// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
)

// The probe role's endpoints: the probe's status, its largest flows and
// its totals per application.
func (s *Server) probeRoutes(m *mux) {
	read(m, "GET /v1/flows/status", func(context.Context) (probed.Status, error) { return s.P.Status() })
	// What every role answers: the harness and operators' checks ask it.
	read(m, "GET /v1/status", func(context.Context) (probed.Status, error) { return s.P.Status() })
	read(m, "GET /v1/flows/apps", func(context.Context) ([]flowprobe.AppTotals, error) { return orEmpty(s.P.Engine.Apps()), nil })
	m.HandleFunc("GET /v1/flows/top", func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				fail(w, fmt.Errorf("%w: n=%q is not a positive number", apiv1.ErrBadRequest, v))
				return
			}
		}
		writeJSON(w, http.StatusOK, orEmpty(s.P.Engine.Top(n)))
	})
	m.HandleFunc("GET /v1/flows/records", func(w http.ResponseWriter, r *http.Request) {
		var since uint64
		if v := r.URL.Query().Get("since"); v != "" {
			var err error
			if since, err = strconv.ParseUint(v, 10, 64); err != nil {
				fail(w, fmt.Errorf("%w: since=%q is not a record number", apiv1.ErrBadRequest, v))
				return
			}
		}
		rs, next := s.P.Engine.Records(since, 10000)
		writeJSON(w, http.StatusOK, apiv1.RecordsPage{Records: orEmpty(rs), Next: next})
	})
	m.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		q, kinds, err := eventsQuery(r)
		if err != nil {
			fail(w, err)
			return
		}
		es, err := s.P.Events(kinds)
		if err != nil {
			fail(w, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err))
			return
		}
		// since and limit as the daemon's events read them: after since,
		// then the newest limit.
		es = slices.DeleteFunc(es, func(e probed.Event) bool { return !q.Since.IsZero() && !e.Time.After(q.Since) })
		if q.Limit > 0 && len(es) > q.Limit {
			es = es[len(es)-q.Limit:]
		}
		writeJSON(w, http.StatusOK, es)
	})
	m.Handle("GET /metrics", promhttp.HandlerFor(s.P.Metrics, promhttp.HandlerOpts{}))
}

// orEmpty is s, or an empty list for nil: an empty list is [], not null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// FlowRecords returns the records numbered since and later, one page.
func (c *Client) FlowRecords(ctx context.Context, since uint64) (p apiv1.RecordsPage, err error) {
	return p, c.Do(ctx, "GET", "/v1/flows/records?since="+strconv.FormatUint(since, 10), nil, &p)
}

// FlowStatus is the probe's status.
func (c *Client) FlowStatus(ctx context.Context) (st probed.Status, err error) {
	return st, c.Do(ctx, "GET", "/v1/flows/status", nil, &st)
}

// FlowTop returns the n largest flows reported.
func (c *Client) FlowTop(ctx context.Context, n int) (rs []flowprobe.Record, err error) {
	return rs, c.Do(ctx, "GET", "/v1/flows/top?n="+strconv.Itoa(n), nil, &rs)
}

// FlowApps returns the probe's totals per application.
func (c *Client) FlowApps(ctx context.Context) (as []flowprobe.AppTotals, err error) {
	return as, c.Do(ctx, "GET", "/v1/flows/apps", nil, &as)
}

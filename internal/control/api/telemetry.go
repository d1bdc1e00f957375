// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// Network mode's state: GET /v1/telemetry[?top=N]. It reads the
// collector's own state, not the loop's, so it answers while the loop is
// in its interval.
func (s *Server) telemetryRoutes(m *mux) {
	m.HandleFunc("GET /v1/telemetry", func(w http.ResponseWriter, r *http.Request) {
		top := 20
		if v := r.URL.Query().Get("top"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1000 {
				fail(w, fmt.Errorf("%w: top %q: want 0..1000", apiv1.ErrBadRequest, v))
				return
			}
			top = n
		}
		st := s.D.Telemetry(top)
		writeJSON(w, http.StatusOK, st)
	})
}

// Telemetry reads network mode's state with the top n destinations.
func (c *Client) Telemetry(ctx context.Context, top int) (st telemetry.Status, err error) {
	return st, c.Do(ctx, "GET", "/v1/telemetry?top="+strconv.Itoa(top), nil, &st)
}

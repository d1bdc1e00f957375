// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/apiv1"
)

// The attack log: every attack's latest report, and its pcap of sampled
// dropped packets.
func (s *Server) attackRoutes(m *mux) {
	read(m, "GET /v1/attacks", func(c context.Context) ([]alert.Report, error) { return s.D.Attacks(c) })
	m.HandleFunc("GET /v1/attacks/{id}", func(w http.ResponseWriter, r *http.Request) {
		c, cancel := ctx(r)
		defer cancel()
		rep, err := s.D.Attack(c, r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	m.HandleFunc("GET /v1/attacks/{id}/pcap", func(w http.ResponseWriter, r *http.Request) {
		c, cancel := ctx(r)
		defer cancel()
		id := r.PathValue("id")
		p, err := s.D.AttackPcap(c, id)
		if err != nil {
			fail(w, err)
			return
		}
		f, err := os.Open(p)
		if err != nil {
			fail(w, fmt.Errorf("opening the pcap of %s: %w", id, err))
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".pcap"))
		_, _ = io.Copy(w, f) // the client sees a short body
	})
}

// Attacks lists the attack log.
func (c *Client) Attacks(ctx context.Context) (rs []alert.Report, err error) {
	return rs, c.Do(ctx, "GET", "/v1/attacks", nil, &rs)
}

// Attack returns one attack's latest report.
func (c *Client) Attack(ctx context.Context, id string) (r alert.Report, err error) {
	return r, c.Do(ctx, "GET", "/v1/attacks/"+url.PathEscape(id), nil, &r)
}

// AttackPcap copies an attack's pcap to w.
func (c *Client) AttackPcap(ctx context.Context, id string, w io.Writer) error {
	req, err := c.request(ctx, "GET", "/v1/attacks/"+url.PathEscape(id)+"/pcap", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("daemon at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e apiv1.ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(b)
		}
		return &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading the pcap of %s: %w", id, err)
	}
	return nil
}

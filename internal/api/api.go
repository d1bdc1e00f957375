// Package api is the daemon's HTTP API: JSON over a unix socket (mode
// 0600: file permissions are the authentication) and, optionally, over TCP
// on localhost with a bearer token. Every error is a JSON object with a
// 4xx or 5xx status; bodies are size-limited and unknown fields refused.
package api

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/daemon"
	"github.com/tierwall/tierwall/internal/probed"
	"github.com/tierwall/tierwall/internal/rule"
)

//go:embed openapi.json
var openAPI []byte

// Server serves the API for one daemon.
type Server struct {
	D       *daemon.Daemon // the mitigation role
	P       *probed.Probed // the probe role (D nil)
	MaxBody int64
	// MaxBatchBody bounds POST /v1/rules/batch (default 32 MiB).
	MaxBatchBody int64
	Token        string // required on the TCP listener
}

// ErrorBody is every error answer.
type ErrorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, daemon.ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, daemon.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, ErrorBody{err.Error()})
}

// flowRule reads a FlowRuleRequest and parses its rule.
func (s *Server) flowRule(w http.ResponseWriter, r *http.Request) (rule.FlowRule, FlowRuleRequest, error) {
	var req FlowRuleRequest
	if err := s.decode(w, r, &req); err != nil {
		return rule.FlowRule{}, req, err
	}
	fr, err := rule.ParseFlowRule(strings.Fields(req.Rule))
	if err != nil {
		return fr, req, fmt.Errorf("%w: rule: %v", daemon.ErrBadRequest, err)
	}
	return fr, req, nil
}

// banOptions reads a ban request's ttl (Go duration, empty: none) and
// reason (empty: "operator").
func banOptions(ttl, reason string) (time.Duration, string, error) {
	var d time.Duration
	if ttl != "" {
		var err error
		if d, err = time.ParseDuration(ttl); err != nil || d < 0 {
			return 0, "", fmt.Errorf("%w: ttl %q is not a positive duration", daemon.ErrBadRequest, ttl)
		}
	}
	if reason == "" {
		reason = "operator"
	}
	return d, reason, nil
}

// maxBatch bounds a batch body: 100K IPv6 prefixes are about 5 MB.
func (s *Server) maxBatch() int64 {
	if s.MaxBatchBody > 0 {
		return s.MaxBatchBody
	}
	return 32 << 20
}

// decode reads a JSON body strictly.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeLimit(w, r, v, s.MaxBody)
}

// decodeLimit is decode with its own size limit.
func (s *Server) decodeLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("%w: content type %q, want application/json", daemon.ErrBadRequest, ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("%w: body: %v", daemon.ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body holds more than one JSON value", daemon.ErrBadRequest)
	}
	return nil
}

func prefixParam(r *http.Request) (netip.Prefix, error) {
	raw := r.PathValue("prefix")
	// Prefixes travel in the path with '/' escaped or as addr_len.
	raw = strings.Replace(raw, "_", "/", 1)
	p, err := rule.Parse(raw)
	if err != nil {
		return p, fmt.Errorf("%w: %v", daemon.ErrBadRequest, err)
	}
	return p, nil
}

// BatchRequest is the body of POST /v1/rules/batch: many operator bans,
// all or nothing.
type BatchRequest struct {
	Prefixes []string `json:"prefixes"`
	Reason   string   `json:"reason"`
	TTL      string   `json:"ttl"`
}

// BatchResponse says how many prefixes the batch held and how many were
// not banned before.
type BatchResponse struct {
	Prefixes int `json:"prefixes"`
	New      int `json:"new"`
}

// RuleRequest is the body of POST /v1/rules.
type RuleRequest struct {
	Prefix string `json:"prefix"`
	Reason string `json:"reason"`
	TTL    string `json:"ttl"` // Go duration; empty: no expiry
}

// FlowRuleRequest is the body of POST and DELETE /v1/flowrules: the rule
// in the CLI's words (rule.ParseFlowRule), e.g.
// "dst 198.51.100.7/32 proto udp sport 53 drop".
type FlowRuleRequest struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason,omitempty"`
	TTL    string `json:"ttl,omitempty"` // Go duration; empty: no expiry (POST only)
}

// AllowRequest is the body of POST /v1/allowlist.
type AllowRequest struct {
	Prefix string `json:"prefix"`
}

func ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}

// read registers a GET endpoint whose answer is f's value as JSON.
func read[T any](m *http.ServeMux, pattern string, f func(context.Context) (T, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c, cancel := ctx(r)
		defer cancel()
		v, err := f(c)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// Handler is the API without authentication (unix socket).
func (s *Server) Handler() http.Handler {
	if s.MaxBody == 0 {
		s.MaxBody = 64 << 10
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPI)
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorBody{fmt.Sprintf("no endpoint %s %s (see /v1/openapi.json)", r.Method, r.URL.Path)})
	})
	if s.D == nil {
		s.probeRoutes(m)
		return m
	}
	read(m, "GET /v1/status", func(c context.Context) (any, error) { return s.D.Status(c) })
	s.attackRoutes(m)
	read(m, "GET /v1/rules", func(c context.Context) (any, error) { return s.D.Rules(c) })
	m.HandleFunc("POST /v1/rules", func(w http.ResponseWriter, r *http.Request) {
		var req RuleRequest
		if err := s.decode(w, r, &req); err != nil {
			fail(w, err)
			return
		}
		p, err := rule.Parse(req.Prefix)
		if err != nil {
			fail(w, fmt.Errorf("%w: prefix: %v", daemon.ErrBadRequest, err))
			return
		}
		ttl, reason, err := banOptions(req.TTL, req.Reason)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		b, err := s.D.AddRule(c, p, reason, ttl)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, b)
	})
	m.HandleFunc("POST /v1/rules/batch", func(w http.ResponseWriter, r *http.Request) {
		var req BatchRequest
		if err := s.decodeLimit(w, r, &req, s.maxBatch()); err != nil {
			fail(w, err)
			return
		}
		ps := make([]netip.Prefix, 0, len(req.Prefixes))
		for i, raw := range req.Prefixes {
			p, err := rule.Parse(raw)
			if err != nil {
				fail(w, fmt.Errorf("%w: prefixes[%d]: %v (nothing changed)", daemon.ErrBadRequest, i, err))
				return
			}
			ps = append(ps, p)
		}
		ttl, reason, err := banOptions(req.TTL, req.Reason)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		n, err := s.D.AddRules(c, ps, reason, ttl)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, BatchResponse{Prefixes: len(ps), New: n})
	})
	m.HandleFunc("DELETE /v1/rules/{prefix...}", func(w http.ResponseWriter, r *http.Request) {
		p, err := prefixParam(r)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		if err := s.D.DeleteRule(c, p); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	read(m, "GET /v1/flowrules", func(c context.Context) (any, error) { return s.D.FlowRules(c) })
	read(m, "GET /v1/victims", func(c context.Context) (any, error) { return s.D.VictimStatus(c) })
	m.HandleFunc("POST /v1/flowrules", func(w http.ResponseWriter, r *http.Request) {
		fr, req, err := s.flowRule(w, r)
		if err != nil {
			fail(w, err)
			return
		}
		ttl, reason, err := banOptions(req.TTL, req.Reason)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		out, err := s.D.AddFlowRule(c, fr, reason, ttl)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, out)
	})
	m.HandleFunc("DELETE /v1/flowrules", func(w http.ResponseWriter, r *http.Request) {
		fr, _, err := s.flowRule(w, r)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		if err := s.D.DeleteFlowRule(c, fr); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	read(m, "GET /v1/allowlist", func(c context.Context) (any, error) { return s.D.Allowlist(c) })
	m.HandleFunc("POST /v1/allowlist", func(w http.ResponseWriter, r *http.Request) {
		var req AllowRequest
		if err := s.decode(w, r, &req); err != nil {
			fail(w, err)
			return
		}
		p, err := rule.Parse(req.Prefix)
		if err != nil {
			fail(w, fmt.Errorf("%w: prefix: %v", daemon.ErrBadRequest, err))
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		if err := s.D.SetAllow(c, p, true); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]string{"prefix": p.String()})
	})
	m.HandleFunc("DELETE /v1/allowlist/{prefix...}", func(w http.ResponseWriter, r *http.Request) {
		p, err := prefixParam(r)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		if err := s.D.SetAllow(c, p, false); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		var kinds []string
		if k := r.URL.Query().Get("kind"); k != "" {
			kinds = strings.Split(k, ",")
		}
		writeJSON(w, http.StatusOK, s.D.Events(kinds...))
	})
	m.HandleFunc("GET /v1/detections", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.D.Events("ban", "refused", "breaker"))
	})
	read(m, "GET /v1/top", func(c context.Context) (any, error) { return s.D.Top(c) })
	read(m, "GET /v1/tiers", func(c context.Context) (any, error) { return s.D.Tiers(c) })
	m.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		c, cancel := ctx(r)
		defer cancel()
		cfg, err := s.D.Config(c)
		if err != nil {
			fail(w, err)
			return
		}
		// Through YAML so field names match the config file (and the
		// token, tagged "-", never leaves).
		y, err := yaml.Marshal(cfg)
		if err != nil {
			fail(w, err)
			return
		}
		var out map[string]any
		if err := yaml.Unmarshal(y, &out); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	m.Handle("GET /metrics", promhttp.HandlerFor(s.D.Metrics.Registry, promhttp.HandlerOpts{}))
	return m
}

// Authenticated wraps h with a bearer-token check (for TCP).
func (s *Server) Authenticated(h http.Handler) http.Handler {
	want := []byte("Bearer " + s.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if s.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tierwall"`)
			writeJSON(w, http.StatusUnauthorized, ErrorBody{"missing or wrong bearer token"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ListenUnix opens the unix socket with mode 0600, replacing a stale one
// (but refusing to take over a socket another daemon still answers on).
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("another tierwall daemon is listening on %s", path)
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve runs h on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

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
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/control/probed"
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
	case errors.Is(err, apiv1.ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, apiv1.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, apiv1.ErrorBody{Error: err.Error()})
}

// flowRuleReq is a FlowRuleRequest with its rule parsed.
type flowRuleReq struct {
	apiv1.FlowRuleRequest
	rule rule.FlowRule
}

// flowRule reads a FlowRuleRequest and parses its rule.
func (s *Server) flowRule(w http.ResponseWriter, r *http.Request) (flowRuleReq, error) {
	var req flowRuleReq
	if err := s.decode(w, r, &req.FlowRuleRequest); err != nil {
		return req, err
	}
	fr, err := rule.ParseFlowRule(strings.Fields(req.Rule))
	if err != nil {
		return req, fmt.Errorf("%w: rule: %v", apiv1.ErrBadRequest, err)
	}
	req.rule = fr
	return req, nil
}

// banOptions reads a ban request's ttl (Go duration, empty: none) and
// reason (empty: "operator").
func banOptions(ttl, reason string) (time.Duration, string, error) {
	var d time.Duration
	if ttl != "" {
		var err error
		if d, err = time.ParseDuration(ttl); err != nil || d < 0 {
			return 0, "", fmt.Errorf("%w: ttl %q is not a positive duration", apiv1.ErrBadRequest, ttl)
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
		return fmt.Errorf("%w: content type %q, want application/json", apiv1.ErrBadRequest, ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("%w: body: %v", apiv1.ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body holds more than one JSON value", apiv1.ErrBadRequest)
	}
	return nil
}

func prefixParam(r *http.Request) (netip.Prefix, error) {
	raw := r.PathValue("prefix")
	// Prefixes travel in the path with '/' escaped or as addr_len.
	raw = strings.Replace(raw, "_", "/", 1)
	p, err := rule.Parse(raw)
	if err != nil {
		return p, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	return p, nil
}

// parsePrefixes reads a batch's prefixes; one that does not parse fails
// the whole batch, naming its index.
func parsePrefixes(raw []string) ([]netip.Prefix, error) {
	ps := make([]netip.Prefix, 0, len(raw))
	for i, x := range raw {
		p, err := rule.Parse(x)
		if err != nil {
			return nil, fmt.Errorf("%w: prefixes[%d]: %v (nothing changed)", apiv1.ErrBadRequest, i, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// operatorBan reads an operator ban's options: ttl empty is nil (see
// RuleRequest), reason empty stays empty (the store names a new ban
// "operator" and an update keeps the old reason).
func operatorBan(ttl, reason string, force, update bool) (ban.Operator, error) {
	o := ban.Operator{Reason: reason, Force: force, Update: update}
	if ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil || d < 0 {
			return o, fmt.Errorf("%w: ttl %q is not a positive duration", apiv1.ErrBadRequest, ttl)
		}
		o.TTL = &d
	}
	return o, nil
}

// banStatus is 201 for a new ban, 200 for one that was there.
func banStatus(added bool) int {
	if added {
		return http.StatusCreated
	}
	return http.StatusOK
}

func ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}

// mux is the API's ServeMux, keeping the patterns it was given: the test
// of the OpenAPI document walks them.
type mux struct {
	*http.ServeMux
	patterns []string
	hint     string // where a caller who missed finds the routes
}

func newMux() *mux { return &mux{ServeMux: http.NewServeMux(), hint: "see /v1/openapi.json"} }

func (m *mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, f)
}

func (m *mux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// ServeHTTP answers what no route takes as JSON errors with the mux's
// own status: 404 for an unknown path, 405 (with Allow) for a known path
// and another method. A catch-all "/" route would turn every 405 into a
// 404, since the mux prefers any route for the method over none.
func (m *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := m.ServeMux.Handler(r); pattern == "" {
		w = &errorWriter{ResponseWriter: w, r: r, hint: m.hint}
	}
	m.ServeMux.ServeHTTP(w, r)
}

// errorWriter replaces the mux's plain-text error with a JSON one.
type errorWriter struct {
	http.ResponseWriter
	r     *http.Request
	hint  string
	wrote bool
}

func (e *errorWriter) WriteHeader(code int) {
	if e.wrote {
		return
	}
	e.wrote = true
	if code < 400 {
		e.ResponseWriter.WriteHeader(code)
		return
	}
	msg := fmt.Sprintf("no endpoint %s %s (%s)", e.r.Method, e.r.URL.Path, e.hint)
	if code == http.StatusMethodNotAllowed {
		msg = fmt.Sprintf("%s is not allowed on %s; allowed: %s", e.r.Method, e.r.URL.Path, e.Header().Get("Allow"))
	}
	e.Header().Del("X-Content-Type-Options")
	writeJSON(e.ResponseWriter, code, apiv1.ErrorBody{Error: msg})
}

func (e *errorWriter) Write(b []byte) (int, error) {
	if !e.wrote {
		e.WriteHeader(http.StatusOK)
		return e.ResponseWriter.Write(b)
	}
	return len(b), nil // the mux's text body: the JSON one is written
}

// listQuery reads the query of a list endpoint: since (RFC 3339 time, or
// a duration back from now: "5m") and limit (the newest n). Any other
// parameter than these and extra is refused: a typo must not read as "no
// filter".
func listQuery(r *http.Request, extra ...string) (apiv1.ListQuery, error) {
	var q apiv1.ListQuery
	v := r.URL.Query()
	for k := range v {
		if k != "since" && k != "limit" && !slices.Contains(extra, k) {
			return q, fmt.Errorf("%w: unknown query parameter %q (known: %s)", apiv1.ErrBadRequest, k, strings.Join(append([]string{"since", "limit"}, extra...), ", "))
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, fmt.Errorf("%w: limit=%q is not a positive number", apiv1.ErrBadRequest, s)
		}
		q.Limit = n
	}
	if s := v.Get("since"); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			q.Since = t
		} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
			q.Since = time.Now().Add(-d)
		} else {
			return q, fmt.Errorf("%w: since=%q is neither an RFC 3339 time nor a positive duration such as 5m", apiv1.ErrBadRequest, s)
		}
	}
	return q, nil
}

// list registers a GET endpoint of a list narrowed by listQuery.
func list[T any](m *mux, pattern string, f func(context.Context, apiv1.ListQuery) (T, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		q, err := listQuery(r)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		v, err := f(c, q)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// read registers a GET endpoint whose answer is f's value as JSON.
func read[T any](m *mux, pattern string, f func(context.Context) (T, error)) {
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

// change serves a request that changes the daemon's state: parse reads
// what the request names (its body or its path) and answers 4xx when it
// cannot, then do acts on it under the request's deadline and says the
// status and the answer (nil: no content).
func change[T any](m *mux, pattern string, parse func(http.ResponseWriter, *http.Request) (T, error),
	do func(context.Context, T) (int, any, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := parse(w, r)
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		status, out, err := do(c, v)
		if err != nil {
			fail(w, err)
			return
		}
		if out == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, out)
	})
}

// body reads a request's JSON body strictly (decode), for change.
func body[T any](s *Server) func(http.ResponseWriter, *http.Request) (T, error) {
	return func(w http.ResponseWriter, r *http.Request) (T, error) {
		var v T
		return v, s.decode(w, r, &v)
	}
}

// eventsQuery reads GET /v1/events' since, limit and kind (a comma
// list), as both roles serve it.
func eventsQuery(r *http.Request) (apiv1.ListQuery, []string, error) {
	q, err := listQuery(r, "kind")
	if err != nil {
		return q, nil, err
	}
	var kinds []string
	if k := r.URL.Query().Get("kind"); k != "" {
		kinds = strings.Split(k, ",")
	}
	return q, kinds, nil
}

// pathPrefix reads the {prefix...} of a request's path, for change.
func pathPrefix(_ http.ResponseWriter, r *http.Request) (netip.Prefix, error) { return prefixParam(r) }

// batch serves a POST whose body names prefixes: the body is read within
// the batch limit and every prefix parsed before do runs, so one bad
// prefix changes nothing; do gets the daemon's deadline and returns the
// status and body of its answer.
func batch[Req any](s *Server, m *mux, pattern string, prefixes func(*Req) []string,
	do func(c context.Context, req *Req, ps []netip.Prefix) (int, any, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := s.decodeLimit(w, r, &req, s.maxBatch()); err != nil {
			fail(w, err)
			return
		}
		ps, err := parsePrefixes(prefixes(&req))
		if err != nil {
			fail(w, err)
			return
		}
		c, cancel := ctx(r)
		defer cancel()
		status, v, err := do(c, &req, ps)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, status, v)
	})
}

// Handler is the API without authentication (unix socket).
func (s *Server) Handler() http.Handler { return s.routes() }

// routes builds the API's mux.
func (s *Server) routes() *mux {
	if s.MaxBody == 0 {
		s.MaxBody = 64 << 10
	}
	m := newMux()
	m.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPI)
	})
	if s.D == nil {
		s.probeRoutes(m)
		return m
	}
	read(m, "GET /v1/status", func(c context.Context) (any, error) { return s.D.Status(c) })
	s.attackRoutes(m)
	s.telemetryRoutes(m)
	list(m, "GET /v1/rules", func(c context.Context, q apiv1.ListQuery) (any, error) { return s.D.Rules(c, q) })
	change(m, "POST /v1/rules", body[apiv1.RuleRequest](s), func(c context.Context, req apiv1.RuleRequest) (int, any, error) {
		p, err := rule.Parse(req.Prefix)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: prefix: %v", apiv1.ErrBadRequest, err)
		}
		o, err := operatorBan(req.TTL, req.Reason, req.Force, req.Update)
		if err != nil {
			return 0, nil, err
		}
		b, err := s.D.OperatorBan(c, p, o)
		return banStatus(b.Result == ban.Added), b, err
	})
	batch(s, m, "POST /v1/rules/batch", func(q *apiv1.BatchRequest) []string { return q.Prefixes },
		func(c context.Context, req *apiv1.BatchRequest, ps []netip.Prefix) (int, any, error) {
			o, err := operatorBan(req.TTL, req.Reason, req.Force, req.Update)
			if err != nil {
				return 0, nil, err
			}
			res, err := s.D.OperatorBans(c, ps, o, req.AllOrNothing)
			return banStatus(res.New > 0), res, err
		})
	batch(s, m, "POST /v1/rules/delete", func(q *apiv1.UnbanRequest) []string { return q.Prefixes },
		func(c context.Context, req *apiv1.UnbanRequest, ps []netip.Prefix) (int, any, error) {
			res, err := s.D.OperatorUnbans(c, ps, req.All)
			return http.StatusOK, res, err
		})
	batch(s, m, "POST /v1/allowlist/batch", func(q *apiv1.AllowBatchRequest) []string { return q.Prefixes },
		func(c context.Context, req *apiv1.AllowBatchRequest, ps []netip.Prefix) (int, any, error) {
			n, err := s.D.OperatorAllows(c, ps, !req.Delete, req.Force)
			return http.StatusOK, apiv1.UnbanResult{Prefixes: n}, err
		})
	// Without a prefix the mux would redirect to /v1/rules/ (a 3xx with
	// no body that clients follow as a GET): say what is missing.
	for _, p := range []string{"DELETE /v1/rules", "DELETE /v1/allowlist"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			fail(w, fmt.Errorf("%w: name the prefix: DELETE %s/{prefix} (addr or addr_len, e.g. 10.0.0.0_8)", apiv1.ErrBadRequest, r.URL.Path))
		})
	}
	change(m, "DELETE /v1/rules/{prefix...}", pathPrefix, func(c context.Context, p netip.Prefix) (int, any, error) {
		return http.StatusNoContent, nil, s.D.DeleteRule(c, p)
	})
	read(m, "GET /v1/flowrules", func(c context.Context) (any, error) {
		rs, err := s.D.FlowRules(c)
		rs = slices.Clone(rs)
		if rs == nil {
			rs = []mitigate.Rule{}
		}
		for i := range rs {
			rs[i].MatchedPPS, rs[i].DroppedPPS = apiv1.RoundRate(rs[i].MatchedPPS), apiv1.RoundRate(rs[i].DroppedPPS)
		}
		return rs, err
	})
	read(m, "GET /v1/provisional", s.D.Heavy)
	read(m, "GET /v1/bgp", func(c context.Context) (apiv1.BGPStatus, error) { return s.D.BGP(), nil })
	read(m, "GET /v1/victims", func(c context.Context) (any, error) {
		v, err := s.D.VictimStatus(c)
		if v.Attacks == nil {
			v.Attacks = []detect.Judgement{}
		}
		if v.Active == nil {
			v.Active = []detect.Mitigation{}
		}
		// Copies: the daemon's own slices are not the API's to change.
		v.Attacks, v.Active = slices.Clone(v.Attacks), slices.Clone(v.Active)
		for i := range v.Attacks {
			roundEvidence(&v.Attacks[i].Evidence)
		}
		for i := range v.Active {
			roundEvidence(&v.Active[i].Evidence)
		}
		return v, err
	})
	change(m, "POST /v1/flowrules", s.flowRule, func(c context.Context, req flowRuleReq) (int, any, error) {
		ttl, reason, err := banOptions(req.TTL, req.Reason)
		if err != nil {
			return 0, nil, err
		}
		out, err := s.D.AddFlowRule(c, req.rule, reason, ttl, req.Force)
		return http.StatusCreated, out, err
	})
	change(m, "DELETE /v1/flowrules", s.flowRule, func(c context.Context, req flowRuleReq) (int, any, error) {
		return http.StatusNoContent, nil, s.D.DeleteFlowRule(c, req.rule)
	})
	read(m, "GET /v1/allowlist", func(c context.Context) (any, error) { return s.D.Allowlist(c) })
	change(m, "POST /v1/allowlist", body[apiv1.AllowRequest](s), func(c context.Context, req apiv1.AllowRequest) (int, any, error) {
		p, err := rule.Parse(req.Prefix)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: prefix: %v", apiv1.ErrBadRequest, err)
		}
		if err := s.D.AllowRule(c, p, req.Force); err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, map[string]string{"prefix": p.String()}, nil
	})
	change(m, "DELETE /v1/allowlist/{prefix...}", pathPrefix, func(c context.Context, p netip.Prefix) (int, any, error) {
		return http.StatusNoContent, nil, s.D.SetAllow(c, p, false)
	})
	m.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		q, kinds, err := eventsQuery(r)
		if err != nil {
			fail(w, err)
			return
		}
		es, err := s.D.Events(kinds, q)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, es)
	})
	list(m, "GET /v1/detections", func(_ context.Context, q apiv1.ListQuery) (any, error) { return s.D.Detections(q), nil })
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

// roundEvidence rounds a judgement's rates and shares.
func roundEvidence(e *detect.Evidence) {
	for _, x := range []*float64{&e.PPS, &e.BPS, &e.SYNPPS, &e.TCPPPS, &e.UDPPPS, &e.BaselinePPS, &e.ThresholdPPS,
		&e.BaselineSYN, &e.BaselineSrcs, &e.BaselineNew} {
		*x = apiv1.RoundRate(*x)
	}
	for _, x := range []*float64{&e.FewShare, &e.Covered} {
		*x = math.Round(*x*1000) / 1000
	}
}

// Authenticated wraps h with a bearer-token check (for TCP).
func (s *Server) Authenticated(h http.Handler) http.Handler {
	want := []byte("Bearer " + s.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if s.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tierwall"`)
			writeJSON(w, http.StatusUnauthorized, apiv1.ErrorBody{Error: "missing or wrong bearer token"})
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

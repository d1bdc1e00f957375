// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/ban"
	"github.com/tierwall/tierwall/internal/daemon"
	"github.com/tierwall/tierwall/internal/detect"
	"github.com/tierwall/tierwall/internal/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no daemon answers")

// Client is the typed client of a daemon's API over its unix socket: what
// the CLI, the demo, the benchmarks and the end-to-end tests use.
type Client struct {
	Socket string
	hc     *http.Client
}

// Dial returns a client when a daemon listens on socket, else ErrNoDaemon.
func Dial(socket string) (*Client, error) {
	conn, err := net.DialTimeout("unix", socket, 300*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("%w on %s: %v", ErrNoDaemon, socket, err)
	}
	conn.Close()
	return NewClient(socket), nil
}

// NewClient returns a client for socket without checking it.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, hc: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}}
}

// StatusError is an answer with a status of 300 or more. A 4xx wraps
// rule.ErrInvalid: the caller's to fix, exit code 2 like the direct path.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("daemon: %s (HTTP %d)", e.Message, e.Code) }

func (e *StatusError) Unwrap() error {
	if e.Code >= 400 && e.Code < 500 {
		return rule.ErrInvalid
	}
	return nil
}

// Do sends body (JSON, if not nil) and decodes a 2xx answer into out (if
// not nil); any other status is a *StatusError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://tierwall"+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("daemon at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e ErrorBody
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding answer of %s %s: %w", method, path, err)
	}
	return nil
}

// PathPrefix is how a prefix travels in a URL path ("192.0.2.0_24").
func PathPrefix(p netip.Prefix) string { return strings.Replace(p.String(), "/", "_", 1) }

func (c *Client) Status(ctx context.Context) (s daemon.Status, err error) {
	return s, c.Do(ctx, "GET", "/v1/status", nil, &s)
}

// Detections returns the recent detections (the heaviest of each
// interval), oldest first.
func (c *Client) Detections(ctx context.Context) (ds []daemon.Detection, err error) {
	return ds, c.Do(ctx, "GET", "/v1/detections", nil, &ds)
}

func (c *Client) Rules(ctx context.Context) (rs []daemon.RuleView, err error) {
	return rs, c.Do(ctx, "GET", "/v1/rules", nil, &rs)
}

// AddRule bans p (ttl 0: no expiry).
func (c *Client) AddRule(ctx context.Context, p netip.Prefix, reason string, ttl time.Duration) (b ban.Ban, err error) {
	req := RuleRequest{Prefix: p.String(), Reason: reason}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return b, c.Do(ctx, "POST", "/v1/rules", req, &b)
}

// AddRules bans every prefix in one request and one data-plane batch, all
// or nothing.
func (c *Client) AddRules(ctx context.Context, ps []netip.Prefix, reason string, ttl time.Duration) (r BatchResponse, err error) {
	req := BatchRequest{Prefixes: make([]string, len(ps)), Reason: reason}
	for i, p := range ps {
		req.Prefixes[i] = p.String()
	}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return r, c.Do(ctx, "POST", "/v1/rules/batch", req, &r)
}

func (c *Client) DeleteRule(ctx context.Context, p netip.Prefix) error {
	return c.Do(ctx, "DELETE", "/v1/rules/"+PathPrefix(p), nil, nil)
}

// FlowRules lists the flow rules in force, with their counters.
func (c *Client) FlowRules(ctx context.Context) (rs []mitigate.Rule, err error) {
	return rs, c.Do(ctx, "GET", "/v1/flowrules", nil, &rs)
}

// AddFlowRule adds an operator's flow rule (ttl 0: until removed), not
// forced: the daemon refuses one that stops traffic to its own addresses.
func (c *Client) AddFlowRule(ctx context.Context, r rule.FlowRule, reason string, ttl time.Duration) (out mitigate.Rule, err error) {
	return c.PostFlowRule(ctx, r, reason, ttl, false)
}

// PostFlowRule is AddFlowRule with force: a rule that stops traffic to
// the daemon's own addresses is taken (one that can stop its BGP or
// management sessions never is).
func (c *Client) PostFlowRule(ctx context.Context, r rule.FlowRule, reason string, ttl time.Duration, force bool) (out mitigate.Rule, err error) {
	req := FlowRuleRequest{Rule: r.String(), Reason: reason, Force: force}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return out, c.Do(ctx, "POST", "/v1/flowrules", req, &out)
}

// DeleteFlowRule removes the flow rule with r's match and action.
func (c *Client) DeleteFlowRule(ctx context.Context, r rule.FlowRule) error {
	return c.Do(ctx, "DELETE", "/v1/flowrules", FlowRuleRequest{Rule: r.String()}, nil)
}

// Heavy is the XDP heavy-hitter detector: its counters and the
// provisional drops in force.
func (c *Client) Heavy(ctx context.Context) (st daemon.HeavyStatus, err error) {
	return st, c.Do(ctx, "GET", "/v1/provisional", nil, &st)
}

// BGP is the speaker's state: neighbours, what we announce, what peers
// sent.
func (c *Client) BGP(ctx context.Context) (st daemon.BGPStatus, err error) {
	return st, c.Do(ctx, "GET", "/v1/bgp", nil, &st)
}

// Victims is the per-victim detector's view: attacks and mitigations.
func (c *Client) Victims(ctx context.Context) (v daemon.Victims, err error) {
	return v, c.Do(ctx, "GET", "/v1/victims", nil, &v)
}

func (c *Client) Allowlist(ctx context.Context) (a daemon.Allowlist, err error) {
	return a, c.Do(ctx, "GET", "/v1/allowlist", nil, &a)
}

func (c *Client) AddAllow(ctx context.Context, p netip.Prefix) error {
	return c.Do(ctx, "POST", "/v1/allowlist", AllowRequest{Prefix: p.String()}, nil)
}

func (c *Client) DeleteAllow(ctx context.Context, p netip.Prefix) error {
	return c.Do(ctx, "DELETE", "/v1/allowlist/"+PathPrefix(p), nil, nil)
}

// Events returns the daemon's recent events, of the given kinds (all when
// none is given).
func (c *Client) Events(ctx context.Context, kinds ...string) (es []daemon.Event, err error) {
	path := "/v1/events"
	if len(kinds) > 0 {
		path += "?kind=" + strings.Join(kinds, ",")
	}
	return es, c.Do(ctx, "GET", path, nil, &es)
}

func (c *Client) Top(ctx context.Context) (ts []detect.Talker, err error) {
	return ts, c.Do(ctx, "GET", "/v1/top", nil, &ts)
}

func (c *Client) Tiers(ctx context.Context) (t daemon.Tiers, err error) {
	return t, c.Do(ctx, "GET", "/v1/tiers", nil, &t)
}

// Metrics returns the Prometheus exposition text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://tierwall/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("daemon at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = &StatusError{Code: resp.StatusCode, Message: string(b)}
	}
	return string(b), err
}

// Kind of rule a Change applies.
const (
	Block = "block"
	Allow = "allow"
)

// Change adds (or removes) each prefix as a ban or an allowlist entry, all
// or nothing: when one fails, those already applied are undone, and the
// error says so.
func (c *Client) Change(ctx context.Context, kind string, ps []netip.Prefix, add bool, reason string) error {
	if kind == Block && add && len(ps) > 1 {
		if _, err := c.AddRules(ctx, ps, reason, 0); err != nil {
			return fmt.Errorf("%w (nothing changed)", err)
		}
		return nil
	}
	apply := func(p netip.Prefix, add bool) error {
		switch {
		case kind == Allow && add:
			return c.AddAllow(ctx, p)
		case kind == Allow:
			return c.DeleteAllow(ctx, p)
		case add:
			_, err := c.AddRule(ctx, p, reason, 0)
			return err
		default:
			return c.DeleteRule(ctx, p)
		}
	}
	for i, p := range ps {
		if err := apply(p, add); err != nil {
			var undo []error
			for _, q := range ps[:i] {
				if uerr := apply(q, !add); uerr != nil {
					undo = append(undo, fmt.Errorf("undoing %s: %w", q, uerr))
				}
			}
			if len(undo) > 0 {
				return fmt.Errorf("%s: %w (undo failed: %w)", p, err, errors.Join(undo...))
			}
			return fmt.Errorf("%s: %w (nothing changed)", p, err)
		}
	}
	return nil
}

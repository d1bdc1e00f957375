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
	"net/url"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no daemon answers")

// Client is the typed client of a daemon's API, over its unix socket or
// over TCP with a bearer token (a remote daemon, as gobgp's CLI reaches
// gobgpd): what the CLI, the demo, the benchmarks and the end-to-end tests
// use.
type Client struct {
	// Socket is where the daemon is, for messages: its unix socket, or
	// the URL of its TCP API.
	Socket string
	base   string // what request paths are appended to
	token  string // bearer token (TCP)
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
	return &Client{Socket: socket, base: "http://tierwall", hc: &http.Client{Timeout: clientTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}}
}

// clientTimeout bounds one request: a batch of 200K prefixes is applied
// in about a second, far inside it.
const clientTimeout = 60 * time.Second

// DialURL returns a client of the daemon whose TCP API is at rawURL
// (http://host:port, api.tcp in its configuration), sending token as its
// bearer token, when something answers there; else ErrNoDaemon.
func DialURL(rawURL, token string) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: --url %q: want http://HOST:PORT", rule.ErrInvalid, rawURL)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: --url %q: give no path, the API's routes start at /v1", rule.ErrInvalid, rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoDaemon, rawURL, err)
	}
	conn.Close()
	return &Client{Socket: u.Scheme + "://" + u.Host, base: u.Scheme + "://" + u.Host, token: token,
		hc: &http.Client{Timeout: clientTimeout}}, nil
}

// request is a request to the daemon: its URL and, over TCP, the token.
func (c *Client) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
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
	req, err := c.request(ctx, method, path, r)
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
		var e apiv1.ErrorBody
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

func (c *Client) Status(ctx context.Context) (s apiv1.Status, err error) {
	return s, c.Do(ctx, "GET", "/v1/status", nil, &s)
}

// Detections returns the recent detections (the heaviest of each
// interval), oldest first.
func (c *Client) Detections(ctx context.Context) (ds []apiv1.Detection, err error) {
	return ds, c.Do(ctx, "GET", "/v1/detections", nil, &ds)
}

func (c *Client) Rules(ctx context.Context) (rs []apiv1.RuleView, err error) {
	return rs, c.Do(ctx, "GET", "/v1/rules", nil, &rs)
}

// AddRule bans p (ttl 0: no expiry).
func (c *Client) AddRule(ctx context.Context, p netip.Prefix, reason string, ttl time.Duration) (b ban.Ban, err error) {
	req := apiv1.RuleRequest{Prefix: p.String(), Reason: reason}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return b, c.Do(ctx, "POST", "/v1/rules", req, &b)
}

// AddRules bans every prefix in one request and one data-plane batch, all
// or nothing.
func (c *Client) AddRules(ctx context.Context, ps []netip.Prefix, reason string, ttl time.Duration) (r apiv1.BatchResult, err error) {
	req := apiv1.BatchRequest{Prefixes: make([]string, len(ps)), Reason: reason}
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
	req := apiv1.FlowRuleRequest{Rule: r.String(), Reason: reason, Force: force}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return out, c.Do(ctx, "POST", "/v1/flowrules", req, &out)
}

// DeleteFlowRule removes the flow rule with r's match and action.
func (c *Client) DeleteFlowRule(ctx context.Context, r rule.FlowRule) error {
	return c.Do(ctx, "DELETE", "/v1/flowrules", apiv1.FlowRuleRequest{Rule: r.String()}, nil)
}

// Heavy is the XDP heavy-hitter detector: its counters and the
// provisional drops in force.
func (c *Client) Heavy(ctx context.Context) (st apiv1.HeavyStatus, err error) {
	return st, c.Do(ctx, "GET", "/v1/provisional", nil, &st)
}

// BGP is the speaker's state: neighbours, what we announce, what peers
// sent.
func (c *Client) BGP(ctx context.Context) (st apiv1.BGPStatus, err error) {
	return st, c.Do(ctx, "GET", "/v1/bgp", nil, &st)
}

// Victims is the per-victim detector's view: attacks and mitigations.
func (c *Client) Victims(ctx context.Context) (v apiv1.Victims, err error) {
	return v, c.Do(ctx, "GET", "/v1/victims", nil, &v)
}

func (c *Client) Allowlist(ctx context.Context) (a apiv1.Allowlist, err error) {
	return a, c.Do(ctx, "GET", "/v1/allowlist", nil, &a)
}

func (c *Client) AddAllow(ctx context.Context, p netip.Prefix) error {
	return c.Do(ctx, "POST", "/v1/allowlist", apiv1.AllowRequest{Prefix: p.String()}, nil)
}

func (c *Client) DeleteAllow(ctx context.Context, p netip.Prefix) error {
	return c.Do(ctx, "DELETE", "/v1/allowlist/"+PathPrefix(p), nil, nil)
}

// Events returns the daemon's recent events, of the given kinds (all when
// none is given).
func (c *Client) Events(ctx context.Context, kinds ...string) (es []apiv1.Event, err error) {
	path := "/v1/events"
	if len(kinds) > 0 {
		path += "?kind=" + strings.Join(kinds, ",")
	}
	return es, c.Do(ctx, "GET", path, nil, &es)
}

func (c *Client) Top(ctx context.Context) (ts []detect.Talker, err error) {
	return ts, c.Do(ctx, "GET", "/v1/top", nil, &ts)
}

func (c *Client) Tiers(ctx context.Context) (t apiv1.Tiers, err error) {
	return t, c.Do(ctx, "GET", "/v1/tiers", nil, &t)
}

// Metrics returns the Prometheus exposition text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	req, err := c.request(ctx, "GET", "/metrics", nil)
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

// DeleteRules lifts the bans on ps in one request, all or nothing: a
// prefix without a ban refuses the request and nothing changes.
func (c *Client) DeleteRules(ctx context.Context, ps []netip.Prefix) (r apiv1.UnbanResult, err error) {
	return r, c.Do(ctx, "POST", "/v1/rules/delete", apiv1.UnbanRequest{Prefixes: prefixStrings(ps)}, &r)
}

// FlushRules lifts every ban in force.
func (c *Client) FlushRules(ctx context.Context) (r apiv1.UnbanResult, err error) {
	return r, c.Do(ctx, "POST", "/v1/rules/delete", apiv1.UnbanRequest{Prefixes: []string{}, All: true}, &r)
}

// ChangeAllows allowlists ps (or takes them off it) in one request, all
// or nothing.
func (c *Client) ChangeAllows(ctx context.Context, ps []netip.Prefix, add, force bool) error {
	return c.Do(ctx, "POST", "/v1/allowlist/batch", apiv1.AllowBatchRequest{Prefixes: prefixStrings(ps), Delete: !add, Force: force}, nil)
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Change adds (or removes) each prefix as a ban or an allowlist entry, in
// one request, all or nothing: the daemon checks every prefix before it
// changes anything. (Undoing request by request, as this did, re-added a
// deleted ban as the operator's, permanent and without its reason.)
func (c *Client) Change(ctx context.Context, kind string, ps []netip.Prefix, add bool, reason string) error {
	var err error
	switch {
	case kind == Allow:
		err = c.ChangeAllows(ctx, ps, add, false)
	case add:
		req := apiv1.BatchRequest{Prefixes: prefixStrings(ps), Reason: reason, AllOrNothing: true}
		err = c.Do(ctx, "POST", "/v1/rules/batch", req, nil)
	default:
		_, err = c.DeleteRules(ctx, ps)
	}
	if err != nil && !strings.Contains(err.Error(), "nothing changed") {
		err = fmt.Errorf("%w (nothing changed)", err)
	}
	return err
}

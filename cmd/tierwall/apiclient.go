package main

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

// daemonClient talks to a running daemon's unix socket. The CLI goes
// through it when a daemon answers, so the daemon's bans, state file and
// hardware tier stay the one truth; --direct bypasses it.
type daemonClient struct{ c *http.Client }

func dialDaemon() *daemonClient {
	if g.direct || g.socket == "" {
		return nil
	}
	conn, err := net.DialTimeout("unix", g.socket, 300*time.Millisecond)
	if err != nil {
		return nil
	}
	conn.Close()
	return &daemonClient{c: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", g.socket)
		}}}}
}

func (d *daemonClient) do(method, path string, body any, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://tierwall"+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.c.Do(req)
	if err != nil {
		return fmt.Errorf("daemon at %s: %w", g.socket, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		json.Unmarshal(b, &e)
		// 4xx are the caller's to fix: exit 2 like the direct path.
		if resp.StatusCode < 500 {
			return fmt.Errorf("%w: daemon: %s", rule.ErrInvalid, e.Error)
		}
		return fmt.Errorf("daemon: %s (HTTP %d)", e.Error, resp.StatusCode)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func pathPrefix(p netip.Prefix) string { return strings.Replace(p.String(), "/", "_", 1) }

// change adds or removes each prefix through the daemon, all or nothing:
// when one fails, those already applied are undone.
func (d *daemonClient) change(kind string, ps []netip.Prefix, add bool) error {
	coll := "/v1/rules"
	if kind == "allow" {
		coll = "/v1/allowlist"
	}
	var done []netip.Prefix
	undo := func() {
		for _, p := range done {
			if add {
				d.do("DELETE", coll+"/"+pathPrefix(p), nil, nil)
			} else {
				d.do("POST", coll, map[string]string{"prefix": p.String()}, nil)
			}
		}
	}
	for _, p := range ps {
		var err error
		if add {
			body := map[string]string{"prefix": p.String()}
			if kind == "block" {
				body["reason"] = "tierwall block add"
			}
			err = d.do("POST", coll, body, nil)
		} else {
			err = d.do("DELETE", coll+"/"+pathPrefix(p), nil, nil)
		}
		if err != nil {
			undo()
			return fmt.Errorf("%s: %w (nothing changed)", p, err)
		}
		done = append(done, p)
	}
	return nil
}

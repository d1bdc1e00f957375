// SPDX-License-Identifier: Apache-2.0

package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// NotifierConfig says where notifications go.
type NotifierConfig struct {
	Webhooks []string      // URLs, each POSTed the report as JSON
	Timeout  time.Duration // per webhook attempt
	Retries  int           // attempts after the first
	Backoff  time.Duration // before the first retry, doubling
	// Exec is a command (argv, never a shell) run with the report as JSON
	// on stdin and TIERWALL_EVENT, TIERWALL_ATTACK_ID, TIERWALL_VICTIM
	// and TIERWALL_PCAP in its environment.
	Exec        []string
	ExecTimeout time.Duration
	Queue       int // reports waiting to be sent; beyond it they are dropped
	// Within, when set, runs f where webhook connections are opened and
	// the hook is started: Go enters a network namespace per thread, and a
	// daemon run with -n is in its namespace on one thread only.
	Within func(f func() error) error
}

// Notifier sends reports from a queue on its own goroutine: Notify never
// waits for a webhook or a hook, and a full queue drops (and counts) the
// report rather than stall the daemon's loop.
type Notifier struct {
	cfg    NotifierConfig
	log    *slog.Logger
	client *http.Client
	q      chan Report
	done   chan struct{}
	stop   context.CancelFunc
	ctx    context.Context
	once   sync.Once

	// Dropped counts reports the full queue refused; Failed counts
	// deliveries (a webhook URL or the hook) that failed for good.
	Dropped, Sent, Failed atomic.Uint64
}

// NewNotifier starts the sender.
func NewNotifier(cfg NotifierConfig, log *slog.Logger) *Notifier {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = 10 * time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 64
	}
	if cfg.Within == nil {
		cfg.Within = func(f func() error) error { return f() }
	}
	ctx, stop := context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	tr.DialContext = func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = cfg.Within(func() error { c, err = dialer.DialContext(ctx, network, addr); return err })
		return c, err
	}
	n := &Notifier{cfg: cfg, log: log, client: &http.Client{Timeout: cfg.Timeout, Transport: tr}, q: make(chan Report, cfg.Queue),
		done: make(chan struct{}), ctx: ctx, stop: stop}
	go n.run()
	return n
}

// Notify queues r; false means the queue was full and r was dropped.
func (n *Notifier) Notify(r Report) bool {
	select {
	case n.q <- r:
		return true
	default:
		n.Dropped.Add(1)
		n.log.Warn("alert queue full: notification dropped", "attack", r.ID, "event", r.Event)
		return false
	}
}

// Close sends what is queued for up to grace, then abandons the rest.
func (n *Notifier) Close(grace time.Duration) {
	n.once.Do(func() {
		close(n.q)
		t := time.AfterFunc(grace, n.stop)
		<-n.done
		t.Stop()
		n.stop()
	})
}

func (n *Notifier) run() {
	defer close(n.done)
	for r := range n.q {
		body, err := json.Marshal(r)
		if err != nil {
			n.Failed.Add(1)
			continue
		}
		for _, u := range n.cfg.Webhooks {
			n.count(n.post(u, body), "webhook", u, r)
		}
		if len(n.cfg.Exec) > 0 {
			n.count(n.exec(body, r), "exec hook", n.cfg.Exec[0], r)
		}
	}
}

func (n *Notifier) count(err error, kind, target string, r Report) {
	if err != nil {
		n.Failed.Add(1)
		n.log.Warn("alert not delivered", "via", kind, "to", target, "attack", r.ID, "event", r.Event, "error", err)
		return
	}
	n.Sent.Add(1)
}

// post delivers body to url, retrying transport errors and non-2xx
// answers with a doubling backoff.
func (n *Notifier) post(url string, body []byte) error {
	wait := n.cfg.Backoff
	var err error
	for attempt := 0; attempt <= n.cfg.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(wait):
			case <-n.ctx.Done():
				return fmt.Errorf("posting to %s: giving up at shutdown: %w", url, err)
			}
			wait = min(2*wait, time.Minute)
		}
		if err = n.postOnce(url, body); err == nil {
			return nil
		}
	}
	return fmt.Errorf("posting to %s after %d attempts: %w", url, n.cfg.Retries+1, err)
}

func (n *Notifier) postOnce(url string, body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tierwall")
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// exec runs the hook directly (no shell: the report's fields never reach
// a command line) with a timeout.
func (n *Notifier) exec(body []byte, r Report) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.cfg.Exec[0], n.cfg.Exec[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	victim := ""
	if r.Victim.IsValid() {
		victim = r.Victim.String()
	}
	cmd.Env = append(os.Environ(), "TIERWALL_EVENT="+string(r.Event), "TIERWALL_ATTACK_ID="+r.ID,
		"TIERWALL_VICTIM="+victim, "TIERWALL_PCAP="+r.Pcap)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A hook that leaves children holding its output must not hold the
	// sender past its timeout.
	cmd.WaitDelay = time.Second
	err := n.cfg.Within(cmd.Start)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("running %s: timed out after %s", n.cfg.Exec[0], n.cfg.ExecTimeout)
		}
		msg := out.String()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("running %s: %w: %s", n.cfg.Exec[0], err, msg)
	}
	return nil
}

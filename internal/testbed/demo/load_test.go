// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// A paced client never sends faster than its pace, and one held up does
// not catch up in a burst once answered again: the server sees at most
// one request per gap per client, plus the one each sends at once.
// (Only upper bounds: a slow machine lowers the counts, never raises
// them.)
func TestLoadPaced(t *testing.T) {
	var served atomic.Int64
	hold := make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if holding.Load() {
			<-hold // the first requests wait here: a stalled server
		}
		served.Add(1)
	}))
	defer srv.Close()
	clients := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	l := &Load{Rate: 20}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { l.Run(ctx, "", srv.URL, clients); close(done) }()

	time.Sleep(500 * time.Millisecond) // 10 gaps stalled
	holding.Store(false)
	close(hold)
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	elapsed := time.Since(start)
	// A client catching up would send the 10 stalled gaps' requests at
	// once on release (about 21 in all); paced, it sends one per gap
	// from there: the stalled one, one at release, then one per 50 ms,
	// and up to two more at the edges (its random start, the cancel).
	limit := int64(len(clients)) * (int64(elapsed.Seconds()*20/2) + 4)
	if n := served.Load(); n == 0 || n > limit {
		t.Fatalf("%d requests served in %v by %d clients paced at 20/s after a 0.5 s stall, want 1..%d", n, elapsed, len(clients), limit)
	}
	if l.OK.Load() == 0 {
		t.Fatal("no request counted as OK")
	}
}

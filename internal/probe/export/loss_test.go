// SPDX-License-Identifier: Apache-2.0

package export

import (
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/export/ipfix"
	"github.com/tierwall/tierwall/internal/probe/export/ipfix/ipfixtest"
)

// What the probe could not track reaches the collector: an options record
// when the counts change (at most every lossEvery), with the records the
// exporter dropped itself, and the last counts at Close.
func TestLossReachesTheCollector(t *testing.T) {
	old := lossEvery
	lossEvery = 0
	t.Cleanup(func() { lossEvery = old })
	l := listen(t)
	x, err := New(Config{Collectors: []Collector{{Address: l.addr()}}, FlushInterval: 20 * time.Millisecond, QueueLen: 1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	loss := ipfix.Loss{IgnoredPackets: 592913, RefusedFlows: 1200}
	x.SetLoss(func() ipfix.Loss {
		mu.Lock()
		defer mu.Unlock()
		return loss
	})
	x.Export(record(0))
	x.Export(record(1)) // the queue holds one: dropped, counted
	options := func() []map[string]uint64 {
		d := ipfixtest.NewDecoder(0)
		var out []map[string]uint64
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, b := range l.msgs {
			m, err := d.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m.Options...)
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(options()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	os := options()
	if len(os) == 0 {
		t.Fatal("no loss record at the collector")
	}
	if o := os[0]; o["0/164"] != 592913 || o["32473/4"] != 1200 || o["0/166"] < 1 {
		t.Fatalf("loss record %v: want 592913 ignored packets, 1200 refused flows, the dropped record", o)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(options()); n != 1 {
		t.Fatalf("%d loss records while the counts stood still, want 1", n)
	}
	mu.Lock()
	loss.UntrackedFlows = 45000
	mu.Unlock()
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	os = options()
	if last := os[len(os)-1]; last["32473/5"] != 45000 {
		t.Fatalf("the last loss record %v: want the counts at Close (45000 untracked flows)", last)
	}
}

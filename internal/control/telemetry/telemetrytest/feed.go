// SPDX-License-Identifier: Apache-2.0

package telemetrytest

import (
	"io"
	"net/netip"
	"sync"
	"time"
)

// Feed sends an sFlow agent's datagrams to w, six flow samples of p at
// the sampling rate each, one datagram every period, with the sequence
// numbers counting up, until stop is called (stop waits for the last
// send; calling it again does nothing). Write errors are ignored: a
// collector not yet listening loses datagrams as a real one would.
func Feed(w io.Writer, agent netip.Addr, rate uint32, p Packet, period time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for seq := uint32(1); ; seq++ {
			s := SFlow{Agent: agent, Sequence: seq}
			for range 6 {
				s.Flow(rate, p)
			}
			_, _ = w.Write(s.Bytes())
			select {
			case <-quit:
				return
			case <-time.After(period):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

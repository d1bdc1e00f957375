// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
)

// observer turns the data plane's feature snapshots into the interval's
// traffic: per source and destination (detect.Traffic), the port
// profile, and the packets the buffers could not hold.
type observer struct {
	// traffic is reused every interval: its tables keep their memory,
	// so a steady flood allocates nothing per interval and the heap stays
	// at one interval's worth instead of growing to two before each GC
	// (the peak RSS is what counts under MemoryMax). Reset drops tables
	// far larger than the interval needs, so a flood's do not outlive it.
	traffic *detect.Traffic
	// ports is the interval's port profile (nil: the data plane keeps
	// none): the same traffic by port, from which the ladder names a port
	// (reflection: UDP source port 53, 123, …).
	ports *detect.PortProfile
	// overflow is the data plane's overflow counter at the last snapshot.
	overflow uint64
	// top is the last interval's heaviest sources, for the API.
	top []detect.Talker
	// interval is the length to count rates over when a snapshot's own
	// is unknown.
	interval time.Duration
	// dropped: this interval's Reset let a flood's tables go (see take).
	dropped bool
}

// releaseMemory returns freed memory to the system (tests count calls).
var releaseMemory = debug.FreeOSMemory

// discard empties the feature buffers at start. What they hold was
// counted before this daemon ran, over a time nobody measured: pinned
// buffers keep counting while no daemon reads them, and the first
// interval took all of it as one interval's (3 s of ping -f, 20 s before
// the start, banned its source for 37017 pps). Only the overflow counter
// is kept, as the baseline of the first interval's. It returns the
// snapshot and what it held, for the log to say what was discarded.
func (o *observer) discard(dp DataPlane) (*datapath.Snapshot, discarded, error) {
	var n discarded
	snap, err := dp.Drain(&n)
	if err != nil {
		return nil, n, fmt.Errorf("draining the feature buffers at start: %w", err)
	}
	o.overflow = snap.Overflow
	return snap, n, nil
}

// discarded counts what a drain at start threw away.
type discarded struct{ flows, packets uint64 }

func (n *discarded) Start(*datapath.Snapshot, int) {}
func (n *discarded) Flow(f *datapath.Flow)         { n.flows++; n.packets += f.Packets }

// take reads the interval's snapshot into the traffic (interval: the
// length to count rates over when the snapshot's own is unknown). The
// traffic's Overflow is the packets of this interval the buffers could
// not hold: the interval is partial, and sources missing from it may
// simply not have fit.
func (o *observer) take(dp DataPlane, interval time.Duration) (*detect.Traffic, *datapath.Snapshot, error) {
	o.interval = interval
	snap, err := dp.Drain(o)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	tr := o.traffic
	if o.dropped {
		// The flood's tables (the traffic's and the drain's, a million-
		// source interval's tens of MB) are garbage now, but the heap's
		// next collection is due only at twice what was live during the
		// flood: the next flood allocated its own beside them, and a
		// flood in two waves took the daemon's peak RSS from 82 to 108 MB
		// (entropy-warmup in make eval-spoof). One forced collection
		// when a flood's tables go, which the quiet interval after it
		// can afford, and the pages go back to the system.
		o.dropped = false
		releaseMemory()
	}
	if snap.Overflow >= o.overflow {
		tr.Overflow = snap.Overflow - o.overflow
	} // else the counter restarted (re-attach): discard took the first reading
	o.overflow = snap.Overflow
	o.ports = (*detect.PortProfile)(snap.Ports)
	return tr, snap, nil
}

// Start empties the traffic for the snapshot's n flows (the observer is
// the drain's FlowSink: each flow goes into the traffic as the drain
// reads it, and no list of them is kept).
func (o *observer) Start(s *datapath.Snapshot, n int) {
	dt := s.End.Sub(s.Start)
	if dt <= 0 {
		dt = o.interval
	}
	if o.traffic == nil {
		o.traffic = detect.NewTrafficSized(dt, n)
		return
	}
	had := cap(o.traffic.Sources)
	o.traffic.Reset(dt, n)
	o.dropped = o.dropped || had >= floodTables && cap(o.traffic.Sources) < had/2
}

// floodTables is the size of tables (sources) from which letting them go
// is worth a forced collection: below it, the garbage is a few MB.
const floodTables = 1 << 16

// Flow adds one flow of the snapshot to the traffic.
func (o *observer) Flow(f *datapath.Flow) {
	o.traffic.Add(f.Src, f.Dst, f.Proto, f.Packets, f.Bytes, f.SYNs)
}

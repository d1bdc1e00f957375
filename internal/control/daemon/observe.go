// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
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
}

// discard empties the feature buffers at start. What they hold was
// counted before this daemon ran, over a time nobody measured: pinned
// buffers keep counting while no daemon reads them, and the first
// interval took all of it as one interval's (3 s of ping -f, 20 s before
// the start, banned its source for 37017 pps). Only the overflow counter
// is kept, as the baseline of the first interval's. It returns the
// snapshot, for the log to say what was discarded.
func (o *observer) discard(dp DataPlane) (*datapath.Snapshot, error) {
	snap, err := dp.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("draining the feature buffers at start: %w", err)
	}
	o.overflow = snap.Overflow
	return snap, nil
}

// take reads the interval's snapshot into the traffic (interval: the
// length to count rates over when the snapshot's own is unknown). The
// traffic's Overflow is the packets of this interval the buffers could
// not hold: the interval is partial, and sources missing from it may
// simply not have fit.
func (o *observer) take(dp DataPlane, interval time.Duration) (*detect.Traffic, *datapath.Snapshot, error) {
	snap, err := dp.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	dt := snap.End.Sub(snap.Start)
	if dt <= 0 {
		dt = interval
	}
	if o.traffic == nil {
		o.traffic = detect.NewTrafficSized(dt, len(snap.Flows))
	} else {
		o.traffic.Reset(dt, len(snap.Flows))
	}
	tr := o.traffic
	for i := range snap.Flows {
		f := &snap.Flows[i]
		tr.Add(f.Src, f.Dst, f.Proto, f.Packets, f.Bytes, f.SYNs)
	}
	if snap.Overflow >= o.overflow {
		tr.Overflow = snap.Overflow - o.overflow
	} // else the counter restarted (re-attach): discard took the first reading
	o.overflow = snap.Overflow
	o.ports = (*detect.PortProfile)(snap.Ports)
	return tr, snap, nil
}

// packets is what a snapshot counted, over all its flows.
func packets(snap *datapath.Snapshot) uint64 {
	var n uint64
	for i := range snap.Flows {
		n += snap.Flows[i].Packets
	}
	return n
}

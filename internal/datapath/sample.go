// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// The sampler's maps belong to one load of the program, like .rodata:
// they are not pinned, so a daemon that re-adopts older pinned state needs
// no new pins, and a sampler left on by a daemon that died goes with its
// program. tw_clock is a per-CPU cache of the clock (bpf/lib/table.h),
// no state either, nor tw_sg, the SYN guard's count in the current jiffy.
var unpinned = map[string]bool{"tw_sample": true, "tw_sample_rb": true, "tw_clock": true, "tw_sg": true}

// SampleSnap is how many bytes of a sampled packet the data plane keeps
// (TW_SAMPLE_SNAP in bpf/lib/sample.h).
const SampleSnap = 256

// sampleHeader is the fixed part of struct tw_sample_rec. bpf2go does not
// describe the struct (no map or global names it), so it is read by hand.
const sampleHeader = 24

// Sample is one packet the filter dropped and the sampler took.
type Sample struct {
	Time   time.Time
	Len    int    // length on the wire
	Reason string // the verdict reason that dropped it
	Data   []byte // the first min(Len, SampleSnap) bytes
}

// Sampler reads the samples of one loaded filter. Sampling is off until
// SetEvery turns it on; Close turns it off.
type Sampler struct {
	d  *Datapath
	rd *ringbuf.Reader
}

// Sampler opens the filter's sample ring. Only a Datapath that loaded the
// program (Attach, LoadDetached) has the ring its program writes.
func (d *Datapath) Sampler() (*Sampler, error) {
	if d.prog == nil {
		return nil, fmt.Errorf("%w: opening the sampler: this process did not load the filter", ErrInvalid)
	}
	rd, err := ringbuf.NewReader(d.maps.TwSampleRb)
	if err != nil {
		return nil, fmt.Errorf("opening the sample ring: %w", err)
	}
	return &Sampler{d: d, rd: rd}, nil
}

// SetEvery samples one in every dropped packets (chosen at random, so a
// flood's pattern does not line up with N); 0 turns sampling off.
func (s *Sampler) SetEvery(every uint32) error {
	if err := s.d.maps.TwSample.Put(uint32(0), every); err != nil {
		return fmt.Errorf("setting the sample rate: %w", err)
	}
	return nil
}

// Drain returns up to max samples already in the ring without waiting:
// the daemon's loop calls it once an interval.
func (s *Sampler) Drain(max int) ([]Sample, error) {
	s.rd.SetDeadline(time.Now())
	var out []Sample
	var rec ringbuf.Record
	for len(out) < max {
		err := s.rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("reading the sample ring: %w", err)
		}
		smp, err := parseSample(rec.RawSample)
		if err != nil {
			return out, err
		}
		out = append(out, smp)
	}
	return out, nil
}

// Close turns sampling off and releases the ring.
func (s *Sampler) Close() error {
	return errors.Join(s.SetEvery(0), s.rd.Close())
}

func parseSample(b []byte) (Sample, error) {
	if len(b) < sampleHeader {
		return Sample{}, fmt.Errorf("reading a sample: %d bytes, want at least %d", len(b), sampleHeader)
	}
	ne := binary.NativeEndian
	ts := ne.Uint64(b[0:])
	n, capLen, reason := ne.Uint32(b[8:]), ne.Uint32(b[12:]), ne.Uint32(b[16:])
	if capLen > SampleSnap || int(capLen) > len(b)-sampleHeader {
		return Sample{}, fmt.Errorf("reading a sample: %d bytes captured in a %d-byte record", capLen, len(b))
	}
	name := reasonNames[filterTwReason(reason)]
	if name == "" {
		name = fmt.Sprintf("reason(%d)", reason)
	}
	t := time.Now()
	if w := monoToWall(ts); w != nil {
		t = *w
	}
	return Sample{Time: t, Len: int(n), Reason: name, Data: append([]byte(nil), b[sampleHeader:sampleHeader+capLen]...)}, nil
}

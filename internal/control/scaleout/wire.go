// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// The wire format of one message: one collector's aggregates of one tick
// for one partition. Binary and fixed, not JSON or protobuf: a detector
// decodes tens of thousands of aggregates a second, every field is a
// number, and a format of our own is checked field by field on the way in
// (it comes from the network: a collector may be broken or not ours).
//
//	"TWAG" version=1 partition:u16 ticklen_ns:u64 tick:i64 count:u16
//	name_len:u8 name
//	count × aggregate:
//	  family:u8 (4|6) addr(4|16) records:u32 first_ns:i64 samples:f64
//	  kinds:u16 (bit k: kind k follows) kinds × (packets bits flows):f64
//	  proto:4×f64  nsrc:u8 nsrc×(port:u16 w:f64)  ndst:u8 ndst×(…)
//	  min_len:u16 max_len:u16 flags_or:u8 flags_and:u8 have_flags:u8
//
// All integers big-endian.

const (
	wireMagic   = "TWAG"
	wireVersion = 1
	// MaxBatch bounds the aggregates of one message whatever the sender
	// says: at most about 600 bytes each, a message stays under NATS's
	// default 1 MiB payload.
	MaxBatch = 1024
	// maxName bounds the collector's name in a message.
	maxName = 64
)

// Batch is one message: a collector's aggregates of one tick for one
// partition.
type Batch struct {
	Collector  string
	Partition  int
	TickLen    time.Duration
	Tick       int64
	Aggregates []telemetry.Aggregate
}

// ErrWire: a message that is not a batch this version can read.
var ErrWire = errors.New("malformed aggregate batch")

// AppendBatch appends b's encoding. It does not check b's bounds: the
// collector builds batches within them.
func AppendBatch(out []byte, b *Batch) []byte {
	out = append(out, wireMagic...)
	out = append(out, wireVersion)
	out = binary.BigEndian.AppendUint16(out, uint16(b.Partition))
	out = binary.BigEndian.AppendUint64(out, uint64(b.TickLen))
	out = binary.BigEndian.AppendUint64(out, uint64(b.Tick))
	out = binary.BigEndian.AppendUint16(out, uint16(len(b.Aggregates)))
	name := b.Collector[:min(len(b.Collector), maxName)]
	out = append(out, byte(len(name)))
	out = append(out, name...)
	f64 := func(x float64) { out = binary.BigEndian.AppendUint64(out, math.Float64bits(x)) }
	for i := range b.Aggregates {
		a := &b.Aggregates[i]
		if a.Dst.Is4() {
			v := a.Dst.As4()
			out = append(append(out, 4), v[:]...)
		} else {
			v := a.Dst.As16()
			out = append(append(out, 6), v[:]...)
		}
		out = binary.BigEndian.AppendUint32(out, a.Records)
		var first int64
		if !a.First.IsZero() {
			first = a.First.UnixNano()
		}
		out = binary.BigEndian.AppendUint64(out, uint64(first))
		f64(a.Samples)
		var mask uint16
		for k := range a.Packets {
			if a.Packets[k] != 0 || a.Bytes[k] != 0 || a.Flows[k] != 0 {
				mask |= 1 << k
			}
		}
		out = binary.BigEndian.AppendUint16(out, mask)
		for k := range a.Packets {
			if mask&(1<<k) != 0 {
				f64(a.Packets[k])
				f64(a.Bytes[k])
				f64(a.Flows[k])
			}
		}
		for _, x := range a.Proto {
			f64(x)
		}
		for _, ps := range [][4]telemetry.PortWeight{a.SrcPorts, a.DstPorts} {
			n := 0
			for _, p := range ps {
				if p.Weight > 0 {
					n++
				}
			}
			out = append(out, byte(n))
			for _, p := range ps {
				if p.Weight > 0 {
					out = binary.BigEndian.AppendUint16(out, p.Port)
					f64(p.Weight)
				}
			}
		}
		out = binary.BigEndian.AppendUint16(out, a.MinLen)
		out = binary.BigEndian.AppendUint16(out, a.MaxLen)
		have := byte(0)
		if a.HaveFlags {
			have = 1
		}
		out = append(out, a.FlagsOR, a.FlagsAND, have)
	}
	return out
}

// reader reads a message with its bounds checked at every field; the
// first short read sticks in err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = fmt.Errorf("%w: truncated", ErrWire)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) f64() float64 { return math.Float64frombits(r.u64()) }

// DecodeBatch reads one message. Every count is bounded and checked
// against the bytes there are before anything is allocated for it; the
// aggregates' values are checked by telemetry.Aggregate.Valid.
func DecodeBatch(msg []byte) (Batch, error) {
	var b Batch
	r := &reader{b: msg}
	if string(r.take(len(wireMagic))) != wireMagic {
		return b, fmt.Errorf("%w: no magic", ErrWire)
	}
	if v := r.u8(); v != wireVersion {
		return b, fmt.Errorf("%w: version %d (want %d)", ErrWire, v, wireVersion)
	}
	b.Partition = int(r.u16())
	b.TickLen = time.Duration(r.u64())
	b.Tick = int64(r.u64())
	n := int(r.u16())
	name := r.take(int(r.u8()))
	if r.err != nil {
		return b, r.err
	}
	if len(name) > maxName {
		return b, fmt.Errorf("%w: collector name of %d bytes", ErrWire, len(name))
	}
	b.Collector = string(name)
	if b.TickLen <= 0 {
		return b, fmt.Errorf("%w: tick length %v", ErrWire, b.TickLen)
	}
	// The smallest aggregate is 1+4+4+8+8+2+32+1+1+7 = 68 bytes.
	if n > MaxBatch || n*68 > len(r.b) {
		return b, fmt.Errorf("%w: %d aggregates in %d bytes", ErrWire, n, len(r.b))
	}
	b.Aggregates = make([]telemetry.Aggregate, n)
	for i := range b.Aggregates {
		a := &b.Aggregates[i]
		a.Tick = b.Tick
		switch fam := r.u8(); fam {
		case 4:
			if v := r.take(4); v != nil {
				a.Dst = netip.AddrFrom4([4]byte(v))
			}
		case 6:
			v := r.take(16)
			if v != nil {
				a.Dst = netip.AddrFrom16([16]byte(v))
			}
		default:
			if r.err == nil {
				return b, fmt.Errorf("%w: address family %d", ErrWire, fam)
			}
		}
		a.Records = r.u32()
		if ns := int64(r.u64()); ns != 0 {
			a.First = time.Unix(0, ns)
		}
		a.Samples = r.f64()
		mask := r.u16()
		if int(mask)>>telemetry.NumKinds != 0 {
			return b, fmt.Errorf("%w: kinds %#x", ErrWire, mask)
		}
		if bits.OnesCount16(mask)*24 > len(r.b) {
			return b, fmt.Errorf("%w: truncated", ErrWire)
		}
		for k := range a.Packets {
			if mask&(1<<k) != 0 {
				a.Packets[k], a.Bytes[k], a.Flows[k] = r.f64(), r.f64(), r.f64()
			}
		}
		for j := range a.Proto {
			a.Proto[j] = r.f64()
		}
		for _, ps := range []*[4]telemetry.PortWeight{&a.SrcPorts, &a.DstPorts} {
			np := int(r.u8())
			if np > len(ps) {
				return b, fmt.Errorf("%w: %d top ports", ErrWire, np)
			}
			for j := range np {
				ps[j] = telemetry.PortWeight{Port: r.u16(), Weight: r.f64()}
				// Only weighed ports are sent; a zero here is no collector's.
				if r.err == nil && !(ps[j].Weight > 0) {
					return b, fmt.Errorf("%w: top port %d of weight %v", ErrWire, ps[j].Port, ps[j].Weight)
				}
			}
		}
		a.MinLen, a.MaxLen = r.u16(), r.u16()
		a.FlagsOR, a.FlagsAND = r.u8(), r.u8()
		a.HaveFlags = r.u8() != 0
		if r.err != nil {
			return b, r.err
		}
		if err := a.Valid(); err != nil {
			return b, fmt.Errorf("%w: %w", ErrWire, err)
		}
	}
	if len(r.b) != 0 {
		return b, fmt.Errorf("%w: %d bytes after the last aggregate", ErrWire, len(r.b))
	}
	return b, nil
}

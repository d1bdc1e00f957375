// SPDX-License-Identifier: Apache-2.0

package alert

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Packet is one sampled packet for a pcap.
type Packet struct {
	Time time.Time
	Len  int    // on the wire
	Data []byte // captured bytes, at most Len
}

// pcapSnap is the snap length the file header declares: the data plane
// keeps at most 256 bytes of a packet, and readers accept any bound above
// what the records hold.
const pcapSnap = 65535

// WritePcap writes packets as a classic libpcap file (microsecond
// timestamps, Ethernet). The format is 24 bytes of header and 16 per
// record; gopacket/pcapgo is not a dependency of tierwall, and a new
// module for forty lines of encoding is not worth its weight.
func WritePcap(w io.Writer, pkts []Packet) error {
	bw := bufio.NewWriter(w)
	le := binary.LittleEndian
	var h [24]byte
	le.PutUint32(h[0:], 0xa1b2c3d4) // magic: microsecond resolution
	le.PutUint16(h[4:], 2)          // version 2.4
	le.PutUint16(h[6:], 4)
	// thiszone, sigfigs: 0
	le.PutUint32(h[16:], pcapSnap)
	le.PutUint32(h[20:], 1) // LINKTYPE_ETHERNET
	if _, err := bw.Write(h[:]); err != nil {
		return fmt.Errorf("writing pcap header: %w", err)
	}
	for _, p := range pkts {
		n := len(p.Data)
		if p.Len < n {
			return fmt.Errorf("writing pcap record: %d bytes captured of a %d-byte packet", n, p.Len)
		}
		var r [16]byte
		us := p.Time.UnixMicro()
		le.PutUint32(r[0:], uint32(us/1e6))
		le.PutUint32(r[4:], uint32(us%1e6))
		le.PutUint32(r[8:], uint32(n))
		le.PutUint32(r[12:], uint32(p.Len))
		if _, err := bw.Write(r[:]); err != nil {
			return fmt.Errorf("writing pcap record: %w", err)
		}
		if _, err := bw.Write(p.Data); err != nil {
			return fmt.Errorf("writing pcap record: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing pcap: %w", err)
	}
	return nil
}

// writePcapFile replaces path with a pcap of pkts (written aside, then
// renamed: a reader never sees half a file).
func writePcapFile(path string, pkts []Packet) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pcap-*")
	if err != nil {
		return fmt.Errorf("creating pcap: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err := WritePcap(tmp, pkts); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing pcap: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("publishing pcap: %w", err)
	}
	return nil
}

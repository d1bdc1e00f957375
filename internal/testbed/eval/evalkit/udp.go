// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// FlatOut is the ingest ladder's last rate: as fast as the sender goes.
const FlatOut = 10e6

// The ingest runs' destinations, and the address every collector and
// exporter of the runs is on.
var (
	IngestPrefix = netip.MustParsePrefix("198.18.32.0/20")
	Loopback     = netip.MustParseAddr("127.0.0.1")
)

// RandSrc is a random IPv4 source, spread over 20.0.0.0 to 199.255.255.255
// but off loopback (127/8) and the runs' own 198.18/15: a spoofed source
// there would be the bench's own address space, not the Internet's.
func RandSrc(r *rand.Rand) netip.Addr {
	for {
		a := [4]byte{byte(20 + r.IntN(180)), byte(r.IntN(256)), byte(r.IntN(256)), byte(1 + r.IntN(254))}
		if a[0] == 127 || a[0] == 198 && a[1]&0xfe == 18 {
			continue
		}
		return netip.AddrFrom4(a)
	}
}

// RandIn is a random address inside p.
func RandIn(r *rand.Rand, p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	host := r.Uint32() & (1<<(32-p.Bits()) - 1)
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// FreeUDPPorts finds n UDP ports free on loopback.
func FreeUDPPorts(n int) ([]uint16, error) {
	var out []uint16
	var conns []*net.UDPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: Loopback.AsSlice()})
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		conns = append(conns, c)
		out = append(out, uint16(c.LocalAddr().(*net.UDPAddr).Port))
	}
	return out, nil
}

// udpSocket reads /proc/net/udp's line of the socket on port: its drops
// and receive buffer are found by the listening port.
func udpSocket(port uint16) (fields []string, ok bool) {
	raw, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return nil, false
	}
	want := fmt.Sprintf(":%04X", port)
	for _, l := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) >= 13 && strings.HasSuffix(f[1], want) && f[2] == "00000000:0000" {
			return f, true
		}
	}
	return nil, false
}

// Listening says whether a UDP socket is bound to port.
func Listening(port uint16) bool { _, ok := udpSocket(port); return ok }

// UDPDrops is the socket's drop counter (MaxUint64: no such socket).
func UDPDrops(port uint16) uint64 {
	f, ok := udpSocket(port)
	if !ok {
		return math.MaxUint64
	}
	n, _ := strconv.ParseUint(f[12], 10, 64)
	return n
}

// UDPQueued is the bytes waiting in the socket's receive queue.
func UDPQueued(port uint16) uint64 {
	f, ok := udpSocket(port)
	if !ok {
		return 0
	}
	_, rx, _ := strings.Cut(f[4], ":")
	n, _ := strconv.ParseUint(rx, 16, 64)
	return n
}

// RcvBuf is the receive buffer of the socket on port (ss's skmem rb:
// /proc/net/udp does not show it).
func RcvBuf(port uint16) int {
	out, err := exec.Command("ss", "-ulnm", fmt.Sprintf("sport = :%d", port)).Output()
	if err != nil {
		return 0
	}
	s := string(out)
	if i := strings.Index(s, ",rb"); i >= 0 {
		s = s[i+3:]
		if j := strings.IndexAny(s, ",)"); j >= 0 {
			n, _ := strconv.Atoi(s[:j])
			return n
		}
	}
	return 0
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes.
func LoadAvg() [3]float64 {
	var out [3]float64
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(raw))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

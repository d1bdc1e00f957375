// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The transmit side passes what is for the lab's networks, link-local
// multicast and broadcast and non-IP frames, and drops (and counts) what
// would leave for the internet: the SYN-ACKs answering spoofed sources.
func TestEgressKeepsTheLabsNetworks(t *testing.T) {
	testutil.RequireRoot(t)
	e, err := loadEgress([]netip.Prefix{netip.MustParsePrefix("10.70.0.0/16"), netip.MustParsePrefix("fd70::/16")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	arp := make([]byte, 60)
	copy(arp, nicFrame("10.70.0.1", "10.70.0.10", 6, 80, 1234)[:12])
	arp[12], arp[13] = 0x08, 0x06
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"client v4", nicFrame("10.70.0.1", "10.70.1.53", 6, 80, 40000), xdpPass},
		{"spoofed v4", nicFrame("10.70.0.1", "10.128.4.5", 6, 80, 40000), xdpDrop},
		{"just outside v4", nicFrame("10.70.0.1", "10.71.0.1", 6, 80, 40000), xdpDrop},
		{"broadcast", nicFrame("10.70.0.1", "255.255.255.255", 17, 68, 67), xdpPass},
		{"multicast v4", nicFrame("10.70.0.1", "224.0.0.251", 17, 5353, 5353), xdpPass},
		{"client v6", nicFrame("fd70::1", "fd70::10", 6, 80, 40000), xdpPass},
		{"spoofed v6", nicFrame("fd70::1", "2001:db8::9", 6, 80, 40000), xdpDrop},
		{"neighbour discovery", nicFrame("fd70::1", "ff02::1:ff00:10", 58, 0, 0), xdpPass},
		{"arp", arp, xdpPass},
		{"truncated IPv4", nicFrame("10.70.0.1", "10.128.4.5", 6, 80, 40000)[:20], xdpPass},
	} {
		ret, err := e.objs.TwNicEgress.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			t.Fatal(err)
		}
		if ret != c.want {
			t.Errorf("%s: XDP verdict %d, want %d", c.name, ret, c.want)
		}
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["internet"].Packets != 3 || st["wire"].Packets != 5 || st["other"].Packets != 2 {
		t.Errorf("counters %+v, want 3 to the internet, 5 to the wire, 2 other", st)
	}
}

func TestEgressNeedsNetworks(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := loadEgress(nil); !errors.Is(err, datapath.ErrInvalid) {
		t.Fatalf("no networks: %v, want ErrInvalid", err)
	}
	if _, err := loadEgress([]netip.Prefix{{}}); !errors.Is(err, datapath.ErrInvalid) {
		t.Fatalf("invalid network: %v, want ErrInvalid", err)
	}
}

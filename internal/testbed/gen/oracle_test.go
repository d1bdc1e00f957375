// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The ideal filter drops UDP to its port, IPv4 and IPv6, and passes
// everything else: the clients' TCP, other UDP, a runt frame.
func TestOracleDropsOnlyTheFlood(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadOracle()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables["tw_oracle_port"].Set(uint16(9)); err != nil {
		t.Fatal(err)
	}
	var objs oracleObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	v4, v6 := netip.MustParseAddr("10.70.0.1"), netip.MustParseAddr("fd70::1")
	src4, src6 := netip.MustParseAddr("10.200.1.2"), netip.MustParseAddr("fd00:bad::2")
	const drop, pass = 1, 2
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"udp4 to 9", pkt.Frame{Src: src4, Dst: v4, SrcPort: 1234, DstPort: 9, Proto: pkt.ProtoUDP}.Build(), drop},
		{"udp6 to 9", pkt.Frame{Src: src6, Dst: v6, SrcPort: 1234, DstPort: 9, Proto: pkt.ProtoUDP}.Build(), drop},
		{"udp4 to 53", pkt.Frame{Src: src4, Dst: v4, SrcPort: 9, DstPort: 53, Proto: pkt.ProtoUDP}.Build(), pass},
		{"tcp4 to 9", pkt.Frame{Src: src4, Dst: v4, SrcPort: 40000, DstPort: 9, Proto: pkt.ProtoTCP, TCPFlags: pkt.TCPFlagSYN}.Build(), pass},
		{"tcp6 to 80", pkt.Frame{Src: src6, Dst: v6, SrcPort: 40000, DstPort: 80, Proto: pkt.ProtoTCP, TCPFlags: pkt.TCPFlagSYN}.Build(), pass},
		{"runt", make([]byte, 14), pass},
	} {
		ret, err := objs.TwOracle.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ret != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, ret, c.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"bytes"
	"net/netip"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
)

// A live-frame page can come back rewritten by an XDP program downstream
// (a SYN proxy turns the SYN into its SYN-ACK in place): each frame must
// be the template again, with only its source and checksums new.
func TestGenRewritesRecycledPage(t *testing.T) {
	testutil.RequireRoot(t)
	for _, f := range []pkt.Frame{
		{Src: netip.IPv4Unspecified(), Dst: netip.MustParseAddr("10.70.0.1"), SrcPort: 40000, DstPort: 80, Proto: pkt.ProtoTCP, TCPFlags: pkt.TCPFlagSYN},
		{Src: netip.IPv6Unspecified(), Dst: netip.MustParseAddr("fd70::1"), SrcPort: 53, DstPort: 9, Proto: pkt.ProtoUDP, Payload: make([]byte, 18)},
	} {
		tpl := f.Build()
		spoof := netip.MustParsePrefix("10.128.0.0/9")
		if f.Dst.Is6() {
			spoof = netip.MustParsePrefix("fd00:bad::/32")
		}
		g, err := NewGenerator(GenSpec{Iface: "lo", Template: tpl, Spoof: spoof})
		if err != nil {
			t.Fatal(err)
		}
		page := bytes.Repeat([]byte{0xa5}, len(tpl)) // what a downstream program left
		out := make([]byte, len(tpl))
		ret, err := g.objs.TwGen.Run(&ebpf.RunOptions{Data: page, DataOut: out})
		g.Close()
		if err != nil || ret != 3 { // XDP_TX
			t.Fatalf("run: %d, %v", ret, err)
		}
		// The frame is the template but for the source and checksums:
		// build the same frame with the source the program chose.
		var src netip.Addr
		if f.Dst.Is4() {
			src = netip.AddrFrom4([4]byte(out[26:30]))
		} else {
			src = netip.AddrFrom16([16]byte(out[22:38]))
		}
		if !spoof.Contains(src) {
			t.Fatalf("source %s outside %s", src, spoof)
		}
		f.Src = src
		if want := f.Build(); !bytes.Equal(out, want) {
			t.Fatalf("frame from a rewritten page:\n got %x\nwant %x", out, want)
		}
	}
}

// A live-frames run's stop is per CPU, so the run must stay on one: in
// it the thread may run on one CPU only, the one it started on, and
// afterwards it may run where it could before.
func TestRunsStayOnOneCPU(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to migrate to")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		t.Skipf("the test may run on %d CPU", before.Count())
	}
	err := onOneCPU(func() error {
		var in unix.CPUSet
		if err := unix.SchedGetaffinity(0, &in); err != nil {
			return err
		}
		if in.Count() != 1 {
			t.Errorf("inside the run the thread may use %d CPUs, want 1", in.Count())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("affinity after the run %v, want %v back", after, before)
	}
}

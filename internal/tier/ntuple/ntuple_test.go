// SPDX-License-Identifier: Apache-2.0

package ntuple

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

func golden(t *testing.T, name string) []byte {
	h, err := os.ReadFile("testdata/" + name + ".hex")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(h)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeMatchesUAPI(t *testing.T) {
	a := netip.MustParseAddr
	for _, g := range []struct {
		name string
		loc  uint32
		rule tier.Rule
	}{
		{"ins-src4", 5, tier.Rule{Match: tier.SourceMatch(a("192.0.2.7")), Action: tier.Drop}},
		{"ins-src6", 6, tier.Rule{Match: tier.SourceMatch(a("2001:db8::7")), Action: tier.Drop}},
		{"ins-flow4", 7, tier.Rule{Match: tier.Match{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Proto: unix.IPPROTO_TCP, SrcPort: 40000, DstPort: 443}, Action: tier.Forward}},
		{"ins-flow6", 8, tier.Rule{Match: tier.Match{Src: a("2001:db8::1"), Dst: a("2001:db8::2"), Proto: unix.IPPROTO_UDP, SrcPort: 5353, DstPort: 53}, Action: tier.Forward}},
	} {
		got, err := encodeIns(g.loc, g.rule)
		if err != nil {
			t.Fatal(err)
		}
		want := golden(t, g.name)
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, got, want)
		}
		back, err := decodeRule(want)
		if err != nil || back != g.rule {
			t.Errorf("%s: decoded %+v, %v", g.name, back, err)
		}
	}
	if _, err := encodeIns(1, tier.Rule{Match: tier.Match{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Proto: 1}, Action: tier.Drop}); !errors.Is(err, tier.ErrUnsupported) {
		t.Errorf("ICMP flow: %v, want ErrUnsupported", err)
	}
}

func TestNoNtupleOnVeth(t *testing.T) {
	testutil.RequireRoot(t)
	const a, b = "twntp0", "twntp1"
	exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", a).Run()
	if _, err := Open(a, 0, 0); !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("veth: %v, want ErrUnsupported", err)
	}
	if _, err := Open("twntp-missing", 0, 0); !errors.Is(err, tier.ErrUnsupported) {
		t.Fatalf("missing interface: %v, want ErrUnsupported", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package community

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]Standard{"0:0": 0, "65535:666": Blackhole, "65535:65281": NoExport, "64500:1": 64500<<16 | 1} {
		c, err := ParseStandard(s)
		if err != nil || c != want || c.String() != s {
			t.Errorf("ParseStandard(%q) = %v, %v; want %v", s, c, err, want)
		}
	}
	for s, want := range map[string]Large{"0:0:0": {}, "65000:666:1": {65000, 666, 1},
		"4294967295:4294967295:4294967295": {1<<32 - 1, 1<<32 - 1, 1<<32 - 1}} {
		l, err := ParseLarge(s)
		if err != nil || l != want || l.String() != s {
			t.Errorf("ParseLarge(%q) = %v, %v; want %v", s, l, err, want)
		}
	}
	for _, s := range []string{"", ":", "1", "1:", ":1", "65536:1", "1:65536", "-1:1", "+1:1", "01:1", "1:2:3", "a:b", " 1:1", "1:1 "} {
		if c, err := ParseStandard(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseStandard(%q) = %v, %v; want ErrSyntax", s, c, err)
		}
	}
	for _, s := range []string{"", "1:2", "1:2:3:4", "4294967296:0:0", "1::3", "1:2:x", "1:02:3", "-1:2:3"} {
		if l, err := ParseLarge(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseLarge(%q) = %v, %v; want ErrSyntax", s, l, err)
		}
	}
	if _, err := ParseLarges([]string{"1:2:3", "1:2"}); err == nil || err.Error() != `[1]: not a community: "1:2" is not GLOBAL:LOCAL1:LOCAL2 (three numbers 0..4294967295, RFC 8092)` {
		t.Errorf("ParseLarges: %v", err)
	}
}

func TestJSON(t *testing.T) {
	in := struct {
		C []Standard
		L []Large
	}{[]Standard{Blackhole}, []Large{{65000, 666, 1}}}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"C":["65535:666"],"L":["65000:666:1"]}` {
		t.Fatalf("%s, %v", b, err)
	}
	out := in
	out.C, out.L = nil, nil
	if err := json.Unmarshal(b, &out); err != nil || out.C[0] != Blackhole || out.L[0] != in.L[0] {
		t.Errorf("%+v, %v", out, err)
	}
}

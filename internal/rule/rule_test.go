// SPDX-License-Identifier: Apache-2.0

package rule

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"198.51.100.0/24", "198.51.100.0/24"},
		{" 10.0.0.0/8 ", "10.0.0.0/8"}, // surrounding space is trimmed
		{"2001:db8::/32", "2001:db8::/32"},
	} {
		p, err := Parse(tc.in)
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
	for _, in := range []string{"", "10.0.0", "10.0.0.1/33", "2001:db8::/129", "10.0.0.1/8", "::ffff:10.0.0.1", "fe80::1%eth0", "host.example", "1.2.3.4/-1"} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v, want ErrInvalid", in, err)
		}
	}
}

func TestReadList(t *testing.T) {
	ps, err := ReadList(strings.NewReader("# feed\n192.0.2.1\n\n198.51.100.0/24 # net\n"), "feed")
	if err != nil || len(ps) != 2 {
		t.Fatalf("%v %v", ps, err)
	}
	_, err = ReadList(strings.NewReader("192.0.2.1\nbogus\n"), "feed")
	if err == nil || !strings.Contains(err.Error(), "feed:2") {
		t.Fatalf("error %v does not name line 2", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each error names the file, the line and the field path, and says what
// was expected; every structural error of a file is reported at once.
func TestErrorsLocateFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"typo suggests the field of that level",
			"interface: eth0\ninterval: 1s\nintreval: 2s\n",
			[]string{`tierwall.yaml:3: intreval: unknown field; did you mean "interval"?`}},
		{"nested typo",
			"interface: eth0\ndetectors:\n  rate:\n    enabled: true\n    ceilling_pps: 5\n",
			[]string{`tierwall.yaml:5: detectors.rate.ceilling_pps: unknown field; did you mean "ceiling_pps"?`}},
		{"no suggestion when nothing is close",
			"interface: eth0\nxyzzy: 1\n",
			[]string{`tierwall.yaml:2: xyzzy: unknown field`}},
		{"duration",
			"interface: eth0\nbans:\n  hold: 30s\n  ttl: 1hour\n",
			[]string{`tierwall.yaml:4: bans.ttl: cannot parse "1hour" as a duration`}},
		{"duration without unit",
			"interface: eth0\ninterval: 5\n",
			[]string{`tierwall.yaml:2: interval: cannot parse "5" as a duration (a unit is required: 5s`}},
		{"number",
			"interface: eth0\ndetectors:\n  rate: {pps: lots}\n",
			[]string{`tierwall.yaml:3: detectors.rate.pps: cannot parse "lots" as a number`}},
		{"range of the Go type",
			"interface: eth0\nsynproxy:\n  wscale: 300\n",
			[]string{`tierwall.yaml:3: synproxy.wscale: cannot parse "300" as an integer 0..255`}},
		{"map key",
			"interface: eth0\ndetectors:\n  rate:\n    per_proto_pps: {udp: 5}\n",
			[]string{`tierwall.yaml:4: detectors.rate.per_proto_pps.udp: key cannot parse "udp" as an integer 0..255`}},
		{"list expected",
			"interface: eth0\nrails:\n  allow: 10.0.0.1\n",
			[]string{`tierwall.yaml:3: rails.allow: expected a list, got "10.0.0.1"`}},
		{"all structural errors at once",
			"interface: eth0\nintervall: 1s\nbans: {ttl: soon}\n",
			[]string{`tierwall.yaml:2: intervall: unknown field; did you mean "interval"?`, `tierwall.yaml:3: bans.ttl: cannot parse "soon"`}},
		{"syntax",
			"interface: eth0\n  foo: : bar\n",
			[]string{`tierwall.yaml:2: invalid YAML:`}},
		{"validation carries the line",
			"interface: eth0\n\n\ninterval: 50ms\n",
			[]string{`tierwall.yaml:4: interval: 50ms outside 100ms..1m`}},
		{"validation of a list element",
			"interface: eth0\nrails:\n  protected:\n    - 10.0.0.1\n    - 10.0.0.300/8\n",
			[]string{`tierwall.yaml:5: rails.protected[1]: 10.0.0.300/8 is not an address or prefix`}},
		{"validation of a missing field names the file only",
			"interval: 1s\n",
			[]string{`tierwall.yaml: interface: "" is required`}},
	} {
		_, err := ParseFile("tierwall.yaml", []byte(tc.yaml))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", tc.name, err)
			continue
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d errors %q, want %d", tc.name, len(got), got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("%s: error %d is %q, want it to start %q", tc.name, i, got[i], w)
			}
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tw.yaml")
	if err := os.WriteFile(p, []byte("interface: eth0\nlog: {format: xml}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if want := p + ":2: log.format: xml is not text or json"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "log.format" || fe.Line != 2 {
		t.Errorf("errors.As: %+v", fe)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"intreval", "interval", 1}, {"interval", "interval", 0}, {"ttl", "tl", 1}, {"abc", "xyz", 3}, {"", "ab", 2}} {
		if got := distance(tc.a, tc.b); got != tc.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

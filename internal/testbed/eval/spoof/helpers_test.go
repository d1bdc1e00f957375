// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every scenario has its own name (the report and --only find it by
// name) and a destination; a spoofed flood has a range to spoof from.
func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios() {
		if seen[sc.Name] || sc.Name == "" {
			t.Errorf("scenario name %q twice or empty", sc.Name)
		}
		seen[sc.Name] = true
		if !sc.Dst.IsValid() || sc.DstPort == 0 {
			t.Errorf("%s: no destination", sc.Name)
		}
		if sc.Reflectors == 0 && !sc.SpoofClient && !sc.Spoof.IsValid() {
			t.Errorf("%s: spoofs nothing", sc.Name)
		}
	}
	six := SixClients(3)
	if len(six) != 3 || six[0].String() != "fd70::1:0" || six[0] == six[1] {
		t.Errorf("SixClients(3) = %v", six)
	}
}

func TestClientRate(t *testing.T) {
	p := Params{ClientRate: 50, ConnRate: 5}
	if p.clientRate(Scenario{SYN: true}) != 5 || p.clientRate(Scenario{}) != 50 {
		t.Error("a SYN flood's clients open connections at ConnRate, the others request at ClientRate")
	}
}

func TestGauge(t *testing.T) {
	text := "# TYPE tierwall_x gauge\ntierwall_x_total 9\ntierwall_x 2.5\n"
	if got := gauge(text, "tierwall_x"); got != 2.5 {
		t.Errorf("gauge = %v", got)
	}
	if got := gauge(text, "tierwall_y"); got != 0 {
		t.Errorf("an absent gauge = %v", got)
	}
}

func TestPaceText(t *testing.T) {
	if s := paceText(0, 0); !strings.HasPrefix(s, "The clients are not paced") {
		t.Errorf("unpaced: %q", s)
	}
	s := paceText(20, 0)
	if !strings.Contains(s, "20 requests/s each") || !strings.Contains(s, "unpaced (the next as soon as the last is answered)") {
		t.Errorf("paced requests: %q", s)
	}
}

// The memory section measured by hand survives a rerun's rewrite.
func TestHandMeasured(t *testing.T) {
	md := filepath.Join(t.TempDir(), "EVALUATION-SPOOF.md")
	if handMeasured(md) != "" {
		t.Error("no file, a section")
	}
	body := "# run\n" + memorySection + "measured: 200 MB\n"
	if err := os.WriteFile(md, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := handMeasured(md); got != memorySection+"measured: 200 MB\n" {
		t.Errorf("handMeasured = %q", got)
	}
}

// The feature buffers grow with the CPUs: per CPU, two buffers (A and B)
// of twice 256K slots of 64 bytes, a header and a 2 MiB port profile.
func TestSpoofFeatureMB(t *testing.T) {
	if one, two := spoofFeatureMB(1), spoofFeatureMB(2); one != 68 || two != 2*one {
		t.Errorf("spoofFeatureMB(1) = %d, (2) = %d", one, two)
	}
}

func TestHostURLAndFloodRate(t *testing.T) {
	if got := hostURL(Scenario{}); got != "http://10.70.0.1/" {
		t.Errorf("hostURL = %q", got)
	}
	if got := hostURL(Scenario{Clients6: true}); !strings.HasPrefix(got, "http://[") {
		t.Errorf("hostURL, IPv6 clients = %q", got)
	}
	p := Params{Rate: 1000}
	if p.floodRate(Scenario{}) != 1000 || p.floodRate(Scenario{Rate: 5}) != 5 {
		t.Error("floodRate: the scenario's rate wins over the run's")
	}
}

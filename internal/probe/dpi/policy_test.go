// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/rule"
)

func TestParsePolicy(t *testing.T) {
	var cfg struct {
		Policy map[string]string `yaml:"policy"`
	}
	if err := yaml.Unmarshal([]byte("policy: {default: software, DNS: offload, BitTorrent: discard, youtube: discard}\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	p, err := ParsePolicy(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    Verdict
		want Decision
	}{
		{Verdict{App: AppDNS, Proto: AppDNS}, Offload},
		{Verdict{App: "bittorrent", Proto: "bittorrent"}, Discard},
		{Verdict{App: "youtube", Proto: AppTLS}, Discard},       // by App
		{Verdict{App: "youtube", Proto: AppQUIC}, Discard},      // by App
		{Verdict{App: "google", Proto: AppDNS}, Offload},        // by Proto
		{Verdict{App: AppUnknown, Proto: AppUnknown}, Software}, // the default
	} {
		if got := p.Decide(tc.v); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.v, got, tc.want)
		}
	}
	if a := (Policy{}).Decide(Verdict{App: AppDNS}); a != Offload {
		t.Errorf("zero policy: %s, want offload", a)
	}
	if p, err := ParsePolicy(nil); err != nil || p.Default != Offload {
		t.Errorf("empty policy: %+v, %v", p, err)
	}
}

func TestParsePolicyInvalid(t *testing.T) {
	for _, tc := range []struct {
		m    map[string]string
		name string // what the error must name
	}{
		{map[string]string{"dns": "block"}, `"dns"`},
		{map[string]string{"default": ""}, `"default"`},
		{map[string]string{"": "offload"}, `""`},
		{map[string]string{"a.b": "offload"}, `"a.b"`},
		{map[string]string{"BitTorrent": "discard", "bittorrent": "offload"}, "bittorrent"},
		{map[string]string{"dns": "offload", "zz": "nope"}, `"zz"`},
	} {
		_, err := ParsePolicy(tc.m)
		if !errors.Is(err, rule.ErrInvalid) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%v: %v, want ErrInvalid naming %s", tc.m, err, tc.name)
		}
	}
}

func TestDecisionNames(t *testing.T) {
	for _, d := range []Decision{Offload, Discard, Software} {
		if b, err := ParseDecision(d.String()); err != nil || b != d {
			t.Errorf("%s: ParseDecision %v %v", d, b, err)
		}
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"TLS": "tls", "BitTorrent": "bittorrent", "DoH_DoT": "doh-dot", "FTP_CONTROL": AppFTP,
		"POP3": AppPOP3, "Unknown": AppUnknown, "": AppUnknown, "RemoteAccess": CatRemoteAccess, "Apple iCloud": "apple-icloud",
	} {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}

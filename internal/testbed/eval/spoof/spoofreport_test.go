// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func spoofDoc(t *testing.T, rows []Row) string {
	t.Helper()
	dir := t.TempDir()
	md := filepath.Join(dir, "EVALUATION-SPOOF.md")
	if err := Report(filepath.Join(dir, "eval"), md, rows, Params{Interval: time.Second, Clients: 4}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// The experiment says how the clients were paced, or that they were not.
func TestSpoofSaysThePace(t *testing.T) {
	for _, tc := range []struct {
		rate, conn float64
		want       string
	}{
		{200, 30, "paced as a server's regular users are, not run flat out: 200 requests/s each, keep-alive, and 30 connections/s each"},
		{0, 0, "The clients are not paced"},
		{200, 0, "200 requests/s each, keep-alive, and unpaced"},
	} {
		if got := paceText(tc.rate, tc.conn); !strings.Contains(got, tc.want) {
			t.Errorf("paced at %g, %g: %q, want %q in it", tc.rate, tc.conn, got, tc.want)
		}
	}
}

// Each verdict follows its row, and without rows none is given.
func TestSpoofTargetsFollowRows(t *testing.T) {
	r := Row{Scenario: Scenario{Name: "udp-spoof-16", Spoof: netip.MustParsePrefix("10.200.0.0/16")},
		DetectIntervals: 1, DroppedFrom3: 0.99, BaselineRPS: 1000, AttackRPS: 950, DaemonMaxRSSMB: 80}
	got := spoofDoc(t, []Row{r})
	if !strings.Contains(got, "| 1.0 intervals, 99.0%, 95%, 0 banned, 0 false positives | yes |") || !strings.Contains(got, "peak RSS 80 MB over all scenarios, the feature buffers and tables the daemon maps from the kernel included; its own pages (RssAnon: heap, stacks) at most 0 MB, the rest mapped (the binary, and the two feature buffers of 2 × 2^18 slots and a port profile a CPU, 64 B a slot: "+fmt.Sprint(spoofFeatureMB(runtime.NumCPU()))+" MB on "+fmt.Sprint(runtime.NumCPU())+" CPUs that the kernel holds from attach) | yes |") {
		t.Errorf("all targets met, yet:\n%s", got)
	}
	r.DetectIntervals, r.DaemonMaxRSSMB = -1, 300
	got = spoofDoc(t, []Row{r})
	if !strings.Contains(got, "| never detected, 99.0%, 95%, 0 banned, 0 false positives | **no** |") || !strings.Contains(got, "peak RSS 300 MB over all scenarios, the feature buffers and tables the daemon maps from the kernel included; its own pages (RssAnon: heap, stacks) at most 0 MB, the rest mapped (the binary, and the two feature buffers of 2 × 2^18 slots and a port profile a CPU, 64 B a slot: "+fmt.Sprint(spoofFeatureMB(runtime.NumCPU()))+" MB on "+fmt.Sprint(runtime.NumCPU())+" CPUs that the kernel holds from attach) | **no** |") {
		t.Errorf("never detected and 300 MB, yet:\n%s", got)
	}
	r.DetectIntervals, r.DaemonMaxRSSMB, r.BeforeFlood = 1, 80, []string{"mitigation: rate-limit on port 80"}
	got = spoofDoc(t, []Row{r})
	if !strings.Contains(got, "| 1.0 intervals, 99.0%, 95%, 0 banned, 1 false positives | **no** |") || !strings.Contains(got, "before the flood: mitigation: rate-limit on port 80") {
		t.Errorf("a false positive before the flood, yet:\n%s", got)
	}

	// A SYN flood: one attack SYN that reached the stack after the 3rd
	// interval fails it, the kernel's own cookies (the clients meeting a
	// backlog the flood filled) do not.
	syn := Row{Scenario: Scenario{Name: "syn-spoof-200k", Spoof: netip.MustParsePrefix("10.128.0.0/9"), SYN: true, Rate: 200000},
		DetectIntervals: 1, DroppedFrom3: 1, BaselineRPS: 1000, AttackRPS: 950, PassiveOpens: 900, ClientConns: 950, KernelCookiesFrom3: 40, DaemonMaxRSSMB: 80}
	got = spoofDoc(t, []Row{syn})
	if !strings.Contains(got, "syn-spoof-200k (at 200 Kpps)") || !strings.Contains(got, "95% of the connection rate | yes |") {
		t.Errorf("SYN flood stopped, yet:\n%s", got)
	}
	syn.PassiveOpens = syn.ClientConns + 4 // the 4 reference clients' last connections
	if got = spoofDoc(t, []Row{syn}); !strings.Contains(got, "95% of the connection rate | yes |") {
		t.Errorf("the reference clients' connections in flight counted against it:\n%s", got)
	}
	syn.PassiveOpens++ // one the clients never asked for
	if got = spoofDoc(t, []Row{syn}); !strings.Contains(got, "95% of the connection rate | **no** |") {
		t.Errorf("a connection no client opened, yet:\n%s", got)
	}
	syn.PassiveOpens = 900
	syn.PassedFrom3 = 2 // XDP passed two router solicitations: not attack SYNs
	if got = spoofDoc(t, []Row{syn}); !strings.Contains(got, "95% of the connection rate | yes |") {
		t.Errorf("the lab's own IPv6 control packets counted as attack SYNs:\n%s", got)
	}
	syn.SYNsToStackFrom3 = 1
	if got = spoofDoc(t, []Row{syn}); !strings.Contains(got, "95% of the connection rate | **no** |") {
		t.Errorf("an attack SYN reached the stack, yet:\n%s", got)
	}

	got = spoofDoc(t, nil)
	if strings.Contains(got, "| yes |") || !strings.Contains(got, "not measured in this run") {
		t.Errorf("no rows, yet a verdict:\n%s", got)
	}
}

// The memory section is measured by hand (its commands are in it): a new
// run of the report keeps it, after the run's own sections.
func TestSpoofReportKeepsTheMemorySection(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "EVALUATION-SPOOF.md")
	hand := memorySection + "\nmeasured by hand\n"
	if err := os.WriteFile(md, []byte("# an older run\n"+hand), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Report(filepath.Join(dir, "eval"), md, nil, Params{Interval: time.Second, Clients: 4}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(raw); !strings.HasSuffix(s, hand) || strings.Contains(s, "an older run") || !strings.Contains(s, "## Targets") {
		t.Fatalf("report after a new run:\n%s", s)
	}
}

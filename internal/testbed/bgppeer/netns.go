// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/tierwall/tierwall/internal/bpffs"
)

// Pair is two network namespaces joined by a veth pair: the "tierwall
// host" and the "router" whose daemon peers with it. Addresses are the
// same in every Pair (namespaces do not share them); names are unique
// per process and call, so tests in parallel packages never meet.
type Pair struct {
	Host, Router     string // namespace names
	HostIf, RouterIf string // the veth ends
	Host4, Router4   netip.Addr
	Host6, Router6   netip.Addr
}

// Addresses of every Pair: 10.77.0.0/24 and fd77::/64 on the veth.
var (
	PairHost4   = netip.MustParseAddr("10.77.0.1")
	PairRouter4 = netip.MustParseAddr("10.77.0.2")
	PairHost6   = netip.MustParseAddr("fd77::1")
	PairRouter6 = netip.MustParseAddr("fd77::2")
)

// nsPrefix starts every namespace a Pair makes; what follows is the pid
// of the process that made it, so a later run can remove the leftovers
// of one that crashed.
const nsPrefix = "twbgp"

var pairSeq atomic.Int32

// NewPair makes a Pair; name (a few letters) tells them apart in ip
// netns list. Close removes it.
func NewPair(name string) (*Pair, error) {
	removeStale()
	n := pairSeq.Add(1)
	base := fmt.Sprintf("%s%d-%d-%s", nsPrefix, os.Getpid(), n, name)
	p := &Pair{
		Host: base + "-host", Router: base + "-rtr",
		HostIf: "bgph0", RouterIf: "bgpr0",
		Host4: PairHost4, Router4: PairRouter4, Host6: PairHost6, Router6: PairRouter6,
	}
	steps := [][]string{
		{"ip", "netns", "add", p.Host}, {"ip", "netns", "add", p.Router},
		// Made directly in the namespaces: nothing appears in this one,
		// so fixed interface names never clash.
		{"ip", "link", "add", p.HostIf, "netns", p.Host, "type", "veth", "peer", "name", p.RouterIf, "netns", p.Router},
		{"ip", "-n", p.Host, "addr", "add", p.Host4.String() + "/24", "dev", p.HostIf},
		{"ip", "-n", p.Router, "addr", "add", p.Router4.String() + "/24", "dev", p.RouterIf},
		// nodad: the address is usable at once, not after DAD's second.
		{"ip", "-n", p.Host, "addr", "add", p.Host6.String() + "/64", "dev", p.HostIf, "nodad"},
		{"ip", "-n", p.Router, "addr", "add", p.Router6.String() + "/64", "dev", p.RouterIf, "nodad"},
		{"ip", "-n", p.Host, "link", "set", "lo", "up"}, {"ip", "-n", p.Router, "link", "set", "lo", "up"},
		{"ip", "-n", p.Host, "link", "set", p.HostIf, "up"}, {"ip", "-n", p.Router, "link", "set", p.RouterIf, "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			_ = p.Close() // the step's error is the one to report
			return nil, fmt.Errorf("netns pair %s: %s: %w: %s", name, strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return p, nil
}

// Close kills what still runs in the namespaces and removes them.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range []string{p.Host, p.Router} {
		if err := removeNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeNetns(ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); errors.Is(err, fs.ErrNotExist) {
		return nil // never made (a failed NewPair) or already gone
	}
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			// Never this process: a thread of ours that visited ns can
			// make ip netns pids list it.
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out)))
	}
	// A tierwall attached inside and never detached (a killed test)
	// leaves its tables pinned, keyed by the namespace's name, for as
	// long as the machine runs.
	return bpffs.RemoveNetns(bpffs.DefaultBPFFS, ns)
}

// removeStale removes the namespaces of Pairs whose process is gone.
func removeStale() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = removeNetns(e.Name())
		}
	}
}

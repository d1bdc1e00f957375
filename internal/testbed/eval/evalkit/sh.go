// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Sh runs a command and returns its combined output; its error quotes
// the command and the output.
func Sh(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args[:min(len(args), 4)], " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ShIn runs a command with stdin as its input.
func ShIn(stdin string, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %.300s", strings.Join(args, " "), err, out)
	}
	return nil
}

// VethStat sums the counters of iface (a veth, in namespace ns) that
// ethtool -S names prefix<queue>suffix, as rx_queue_0_xdp_tx_errors:
// veth counts per queue. It fails when no counter has that name.
func VethStat(ns, iface, prefix, suffix string) (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "ethtool", "-S", iface).Output()
	if err != nil {
		return 0, fmt.Errorf("ethtool -S %s in %s: %w", iface, ns, err)
	}
	var n uint64
	found := false
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(k, prefix) || !strings.HasSuffix(k, suffix) {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("ethtool -S %s: %q: %w", iface, l, err)
		}
		n += x
		found = true
	}
	if !found {
		return 0, fmt.Errorf("ethtool -S %s in %s: no %s*%s counter", iface, ns, prefix, suffix)
	}
	return n, nil
}

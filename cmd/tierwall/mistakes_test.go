// SPDX-License-Identifier: Apache-2.0

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/cli"
)

// The same mistake gets the same answer from every command: exit 2 and
// one message (issue 34, item 12). A missing interface was "no such
// interface" from attach, "not attached" from top and block, "no daemon
// answers" from stats and "no NIC stage" from nic list.
func TestSameMistakeSameAnswer(t *testing.T) {
	const missing = "twnosuch0"
	for _, c := range []struct {
		args []string
		want string
	}{
		// Not an address.
		{[]string{"block", "add", "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"block", "del", "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"allow", "add", "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"allow", "del", "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"nic", "add", "-i", missing, "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"nic", "del", "-i", missing, "1.2.3"}, `invalid argument: "1.2.3" is not an address`},
		{[]string{"flowrule", "add", "dst", "1.2.3", "drop"}, `invalid argument: "1.2.3" is not an address`},
		// A prefix with host bits.
		{[]string{"block", "add", "10.0.0.1/8"}, "invalid argument: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"},
		{[]string{"allow", "add", "10.0.0.1/8"}, "invalid argument: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"},
		{[]string{"flowrule", "add", "dst", "10.0.0.1/8", "drop"}, "invalid argument: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"},
		// An interface that is not there.
		{[]string{"stats", "-i", missing}, "no such interface: " + missing},
		{[]string{"top", "-i", missing}, "no such interface: " + missing},
		{[]string{"block", "list", "-i", missing}, "no such interface: " + missing},
		{[]string{"block", "add", "-i", missing, "198.51.100.1"}, "no such interface: " + missing},
		{[]string{"allow", "del", "-i", missing, "198.51.100.1"}, "no such interface: " + missing},
		{[]string{"hw", "probe", "-i", missing}, "no such interface: " + missing},
		{[]string{"nic", "list", "-i", missing}, "no such interface: " + missing},
		{[]string{"nic", "add", "-i", missing, "198.51.100.1"}, "no such interface: " + missing},
	} {
		none := filepath.Join(t.TempDir(), "none.sock")
		_, err := execute(append([]string{"--bpffs", emptyBPFFS(t), "--socket", none}, c.args...)...)
		if err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (exit %d), want exit 2 and %q", strings.Join(c.args, " "), err, cli.ExitCode(err), c.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/datapath"
)

// hw and nic take the interface as -i/--interface like every other
// command; the old positional form still works, with a warning.
func TestHWInterfaceFlag(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		warn, want string
	}{
		{[]string{"hw", "probe", "-i", "tw14cnone0"}, 2, "", "tw14cnone0"},
		{[]string{"hw", "probe", "--interface", "tw14cnone0"}, 2, "", "tw14cnone0"},
		{[]string{"hw", "probe", "tw14cnone0"}, 2, "deprecated: use -i tw14cnone0", "tw14cnone0"},
		{[]string{"hw", "probe"}, 2, "", "no interface: give it with -i IFACE"},
		{[]string{"hw", "probe", "-i", "a", "b"}, 2, "", "1 arguments besides the interface, want 0"},
		{[]string{"nic", "add", "-i", "tw14cnone0"}, 2, "", "want at least 1"},
		{[]string{"nic", "attach", "-i", "tw14cnone0"}, 2, "", "want 1"},
	} {
		g = globals{}
		var stderr bytes.Buffer
		root := newRoot()
		root.SetErr(&stderr)
		root.SetOut(&bytes.Buffer{})
		root.SetArgs(tc.args)
		err := root.Execute()
		if err == nil || cli.ExitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) ||
			(tc.warn != "" && !strings.Contains(stderr.String(), tc.warn)) {
			t.Errorf("%v: %v (exit %d), stderr %q; want exit %d naming %q, warning %q", tc.args, err, cli.ExitCode(err), stderr.String(), tc.code, tc.want, tc.warn)
		}
		if strings.Contains(tc.want, "tw14c") && !errors.Is(err, datapath.ErrNoInterface) {
			t.Errorf("%v: %v is not ErrNoInterface", tc.args, err)
		}
	}
}

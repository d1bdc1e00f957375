// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// AttachFlow in a namespace of its own (names prefixed twnf-, unique per
// process): both programs go on their ports in inline mode and come off
// at Close.
func TestFlowAttach(t *testing.T) {
	testutil.RequireRoot(t)
	ns := vethNetns(t, "twnf", "w", "h", "t")
	err := netnsx.Do(ns, -1, func() error {
		ft, err := AttachFlow("twnfw0", "twnfh0", "twnft0", FlowOptions{Capacity: 16, Inline: true})
		if err != nil {
			return err
		}
		if len(ft.links) != 2 || ft.Caps().Capacity != 16 || !ft.Caps().TCPAutoUnlearn {
			return fmt.Errorf("links %d, caps %+v", len(ft.links), ft.Caps())
		}
		if _, err := ft.Learn([]tier.Learn{{ID: 1, Key: mustKey(6, cli, web), Action: tier.FlowForward}}); err != nil {
			return err
		}
		hasXDP := func(want bool) error {
			for _, ifn := range []string{"twnfw0", "twnfh0"} {
				out, err := exec.Command("ip", "-d", "link", "show", ifn).CombinedOutput()
				if err != nil {
					return err
				}
				if strings.Contains(string(out), "prog/xdp") != want {
					return fmt.Errorf("%s: XDP attached %v, want %v: %s", ifn, !want, want, out)
				}
			}
			return nil
		}
		if err := hasXDP(true); err != nil {
			return err
		}
		if err := ft.Close(); err != nil {
			return err
		}
		if err := hasXDP(false); err != nil {
			return err
		}
		_, err = AttachFlow("twnfw0", "twnfh0", "", FlowOptions{Capacity: 16, Inline: true})
		if err == nil {
			return fmt.Errorf("inline without a twin port attached")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// vethNetns makes a namespace of its own, prefix-PID, removed at the
// test's end, holding a veth pair prefix+p+"0"/prefix+p+"1" for each of
// pairs, all up; it returns the namespace's name.
func vethNetns(t *testing.T, prefix string, pairs ...string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, p := range pairs {
		ip("-n", ns, "link", "add", prefix+p+"0", "type", "veth", "peer", "name", prefix+p+"1")
		ip("-n", ns, "link", "set", prefix+p+"0", "up")
		ip("-n", ns, "link", "set", prefix+p+"1", "up")
	}
	return ns
}

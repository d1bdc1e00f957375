// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rulepkg "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The kernel side of the SYN-cookie stage stays when the daemon stops (a
// restart mid-attack must not drop the clients' handshakes). A daemon that
// starts without the state that put it there — a fresh state file, pins
// gone — must take it down: otherwise every SYN to those ports goes on
// through the kernel's SYNPROXY with no rule in force and nothing saying
// so.
func TestDaemonRemovesAStaleSynproxy(t *testing.T) {
	setupNIC(t)
	testutil.RequireCommand(t, "nft")
	ctx := context.Background()
	t.Cleanup(func() { _ = synproxy.Remove(ctx, nsNHost) })
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeCfg := func(state string) {
		writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 200ms
state_file: %s
capacity: {exact4: 1024, exact6: 256, prefix: 64, allow: 16, features: 4096}
api: {socket: %s}
`, ifHost, filepath.Join(dir, state), sock)))
	}
	writeCfg("state-a.json")
	a := startDaemon(t, cfgPath, sock)
	r, err := rulepkg.ParseFlowRule([]string{"dst", "10.66.0.9/32", "proto", "tcp", "dport", "80", "syn-cookie"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Client.AddFlowRule(ctx, r, "test", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SYNPROXY table", 10*time.Second, func() bool {
		ok, err := synproxy.Installed(ctx, nsNHost)
		return err == nil && ok
	})
	a.Stop()
	if ok, err := synproxy.Installed(ctx, nsNHost); err != nil || !ok {
		t.Fatalf("the table did not outlive its daemon (installed %v, %v): a restart would drop handshakes", ok, err)
	}

	// The same host, its state lost.
	harness.RemovePins(nsNHost)
	_ = os.Remove(filepath.Join(dir, "state-a.json"))
	writeCfg("state-b.json")
	b := startDaemon(t, cfgPath, sock)
	waitFor(t, "the stale SYNPROXY table to go", 10*time.Second, func() bool {
		ok, err := synproxy.Installed(ctx, nsNHost)
		return err == nil && !ok
	})
	rules, err := b.Client.FlowRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 0 {
		t.Fatalf("the new daemon holds %d flow rules, want none: %v", len(rules), rules)
	}
}

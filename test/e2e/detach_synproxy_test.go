// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rulepkg "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The SYN proxy's kernel side outlives its daemon (a restart keeps the
// clients' handshakes), but not the filter: detach removes its nftables
// table and puts nf_conntrack_tcp_loose back as it found it (1), where it
// stayed 0 for the whole namespace.
func TestDetachRemovesTheSynproxy(t *testing.T) {
	setupNIC(t)
	testutil.RequireCommand(t, "nft")
	ctx := context.Background()
	t.Cleanup(func() { _ = synproxy.Remove(ctx, nsNHost) })
	const loose = "net.netfilter.nf_conntrack_tcp_loose"
	sysctl := func() string {
		out, err := exec.Command("ip", "netns", "exec", nsNHost, "sysctl", "-n", loose).CombinedOutput()
		if err != nil {
			t.Fatalf("sysctl %s: %v: %s", loose, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// conntrack's sysctls appear with the module; a namespace starts at 1.
	_ = exec.Command("modprobe", "nf_conntrack").Run()
	sh(t, "ip", "netns", "exec", nsNHost, "sysctl", "-qw", loose+"=1")

	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 200ms
state_file: %s
capacity: {exact4: 1024, exact6: 256, prefix: 64, allow: 16, features: 4096}
api: {socket: %s}
`, ifHost, filepath.Join(dir, "state.json"), sock)))
	d := startDaemon(t, cfgPath, sock)
	r, err := rulepkg.ParseFlowRule([]string{"dst", "10.66.0.9/32", "proto", "tcp", "dport", "80", "syn-cookie"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.AddFlowRule(ctx, r, "test", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SYNPROXY table", 10*time.Second, func() bool {
		ok, err := synproxy.Installed(ctx, nsNHost)
		return err == nil && ok
	})
	if v := sysctl(); v != "0" {
		t.Fatalf("with the SYN proxy up, %s=%s, want 0", loose, v)
	}
	d.Stop()

	out, err := exec.Command(bin, "--netns", nsNHost, "--direct", "detach", "-i", ifHost).CombinedOutput()
	if err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	if ok, err := synproxy.Installed(ctx, nsNHost); err != nil || ok {
		t.Errorf("after detach the SYN proxy's table is still there (installed %v, %v); detach said:\n%s", ok, err, out)
	}
	if v := sysctl(); v != "1" {
		t.Errorf("after detach %s=%s, want the 1 it was before", loose, v)
	}
}

// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
)

func TestDaemonConfig(t *testing.T) {
	c := DaemonConfig("tw-host", "/run/x")
	if c.Interface != "tw-host" || c.StateFile != "/run/x/state.json" || c.API.Socket != "/run/x/api.sock" {
		t.Errorf("%+v", c)
	}
	d := DaemonConfig("lo", "")
	def := config.Default()
	if d.StateFile != def.StateFile || d.API.Socket != def.API.Socket {
		t.Errorf("no directory: state %s, socket %s; want the defaults", d.StateFile, d.API.Socket)
	}
}

// WriteConfig writes what the daemon loads back, and refuses what the
// daemon would refuse before writing anything.
func TestWriteConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tierwall.yaml")
	c := DaemonConfig("tw-host", dir)
	c.Interval = 500 * time.Millisecond
	if err := WriteConfig(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Interval != c.Interval || got.Interface != "tw-host" || got.StateFile != c.StateFile {
		t.Errorf("read back %+v", got)
	}
	bad := DaemonConfig("tw-host", dir)
	bad.Interval = time.Millisecond
	other := filepath.Join(dir, "bad.yaml")
	if err := WriteConfig(other, bad); err == nil || !strings.Contains(err.Error(), "interval") {
		t.Errorf("an interval of 1ms: %v", err)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a refused configuration was written")
	}
}

// SameConfig tells a configuration that reads as the file from one that
// does not.
func TestSameConfig(t *testing.T) {
	c := DaemonConfig("eth0", "")
	c.Detectors.Entropy.Enabled = false
	if err := SameConfig(t.TempDir(), c, "interface: eth0\ndetectors: {entropy: {enabled: false}}\n"); err != nil {
		t.Error(err)
	}
	if err := SameConfig(t.TempDir(), c, "interface: eth0\n"); err == nil || !strings.Contains(err.Error(), "enabled: false") {
		t.Errorf("the entropy detector off against on: %v", err)
	}
	if err := SameConfig(t.TempDir(), c, "interface: eth0\nintreval: 1s\n"); err == nil {
		t.Error("an expected file the daemon refuses was taken")
	}
}

// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/tierwall/tierwall/internal/control/config"
)

// DaemonConfig is the configuration every testbed daemon starts from:
// the defaults, on iface, with its state and API socket in dir (the
// socket is dir/api.sock; "" leaves both at the defaults).
func DaemonConfig(iface, dir string) *config.Config {
	c := config.Default()
	c.Interface = iface
	if dir != "" {
		c.StateFile = dir + "/state.json"
		c.API.Socket = dir + "/api.sock"
	}
	return c
}

// WriteConfig writes c to path as YAML the daemon loads back to c
// (config.Marshal), after checking it as the daemon will.
func WriteConfig(path string, c *config.Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("the testbed's configuration %s: %w", path, err)
	}
	b, err := config.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// SameConfig checks that c, written by WriteConfig and loaded as the
// daemon loads it, is the configuration the YAML text want reads as:
// the test that a configuration built in code says what a hand-written
// file said.
func SameConfig(dir string, c *config.Config, want string) error {
	w, err := config.Parse([]byte(want))
	if err != nil {
		return fmt.Errorf("the expected file: %w", err)
	}
	path := filepath.Join(dir, "tierwall.yaml")
	if err := WriteConfig(path, c); err != nil {
		return err
	}
	got, err := config.Load(path)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(got, w) {
		b, _ := os.ReadFile(path)
		wb, _ := config.Marshal(w)
		return fmt.Errorf("the file written:\n%s\nreads differently from the expected one, which reads as:\n%s", b, wb)
	}
	return nil
}

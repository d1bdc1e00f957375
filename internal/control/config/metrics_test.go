// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"strings"
	"testing"
)

func TestMetricsListen(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\n"))
	if err != nil || c.Metrics.Listen != "" {
		t.Fatalf("default: %q %v, want off", c.Metrics.Listen, err)
	}
	for _, ok := range []string{"127.0.0.1:9477", "[::]:9477", "192.0.2.10:9100", "[::1]:9477"} {
		c, err := Parse([]byte("interface: eth0\nmetrics:\n  listen: \"" + ok + "\"\n"))
		if err != nil || c.Metrics.Listen != ok {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"9477", ":9477", "localhost:9477", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1"} {
		_, err := Parse([]byte("interface: eth0\nmetrics:\n  listen: \"" + bad + "\"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "metrics.listen") {
			t.Errorf("%q: %v, want a metrics.listen error", bad, err)
		}
	}
}

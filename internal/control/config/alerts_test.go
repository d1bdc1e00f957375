// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAlertsConfig(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\nalerts:\n  webhooks: [https://hooks.example/tw]\n  exec: [/bin/true, --flag]\n  sample_every: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Alerts
	if len(a.Webhooks) != 1 || a.Exec[1] != "--flag" || a.SampleEvery != 4 || a.EndAfter != 5 || a.WebhookTimeout != 5*time.Second {
		t.Errorf("%+v", a)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"webhooks: [ftp://x/y]", "alerts.webhooks[0]: ftp://x/y"},
		{"webhooks: ['http://']", "alerts.webhooks[0]"},
		{"exec: [/nonexistent/hook]", "alerts.exec[0]: /nonexistent/hook"},
		{"queue: 0", "alerts.queue: 0"},
		{"end_after: 0", "alerts.end_after: 0"},
		{"retries: 11", "alerts.retries: 11"},
		{"sample_every: -1", "alerts.sample_every: -1"},
		{"webhook_timeout: 0s", "alerts.webhook_timeout"},
		{"log_max_bytes: 10", "alerts.log_max_bytes: 10"},
	} {
		_, err := Parse([]byte("interface: eth0\nalerts:\n  " + tc.yaml + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %q", tc.yaml, err, tc.want)
		}
	}
}

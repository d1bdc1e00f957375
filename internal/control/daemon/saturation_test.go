// SPDX-License-Identifier: Apache-2.0

package daemon

import "testing"

// The loopback interface is in every namespace; its counters read (no
// root needed for a link dump), and a missing interface is an error.
func TestWireLossReadsLinkStatistics(t *testing.T) {
	if _, err := wireLoss("lo"); err != nil {
		t.Fatal(err)
	}
	if _, err := wireLoss("tw-no-such0"); err == nil {
		t.Fatal("a missing interface read as no loss")
	}
}

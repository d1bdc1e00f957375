// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testutil"
)

// A file without flows (nfcapd stopped before any record came, as the
// file it rotates to on the hour can be) reads as no flows, not as an
// error: nfdump prints "No matching flows" for it in every format.
func TestReadEmptyFile(t *testing.T) {
	testutil.RequireCommand(t, "nfcapd", "nfdump")
	n, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	files, err := n.Stop(100 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	tot, err := ReadTotals(files...)
	if err != nil || tot != (Totals{}) {
		t.Fatalf("totals %+v, %v: want none", tot, err)
	}
	fs, err := Read(files...)
	if err != nil || len(fs) != 0 {
		t.Fatalf("flows %v, %v: want none", fs, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"encoding/json"
	"testing"
)

// A record of a flow still running has no end reason: a listing of such
// records must still encode.
func TestZeroEndReasonEncodes(t *testing.T) {
	b, err := json.Marshal(map[string]EndReason{"running": 0, "idle": EndIdle})
	if err != nil || string(b) != `{"idle":"idle","running":"end-reason(0)"}` {
		t.Fatalf("%s, %v", b, err)
	}
}

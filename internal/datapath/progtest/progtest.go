// SPDX-License-Identifier: Apache-2.0

// Package progtest runs XDP programs in tests through BPF_PROG_TEST_RUN
// so that every packet is counted exactly once.
package progtest

import (
	"testing"

	"github.com/cilium/ebpf"
)

// RunEach runs prog on data n times, one repetition per run, and returns
// the last verdict. A run of several repetitions is restarted whole when
// a signal interrupts it (cilium/ebpf retries on EINTR), so its packets
// may be counted twice; one repetition per run is exactly one packet. A
// slow kernel (TCG in scripts/vmtest.sh) makes that interruption common.
func RunEach(t testing.TB, prog *ebpf.Program, data []byte, n int) uint32 {
	t.Helper()
	var ret uint32
	for i := 0; i < n; i++ {
		r, err := prog.Run(&ebpf.RunOptions{Data: data, Repeat: 1})
		if err != nil {
			t.Fatalf("running %s: %v", prog, err)
		}
		ret = r
	}
	return ret
}

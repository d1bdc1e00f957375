// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/bench"
)

// benchTelemetry: what the network mode's collector costs a datagram in
// process, decoding and counting, the socket aside (make eval-network
// measures it through the socket beside FastNetMon).
func benchTelemetry(b *bytes.Buffer, rounds int) {
	fmt.Fprintf(os.Stderr, "bench: telemetry decoding...\n")
	// One goroutine on one CPU, as the collector reads one socket.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	per := 300 * time.Millisecond
	res, err := bench.BenchDecode(bench.DecodeCases(), rounds, per)
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(b, "## Telemetry: decoding and counting a datagram\n\n")
	fmt.Fprintf(b, "Network mode's collector in process (`telemetry.Decoder`, then `Detector.Add` as the collector hands each batch on; thresholds no traffic reaches), one goroutine, the socket aside (`make eval-network` measures the whole path beside FastNetMon): each kind of datagram for %v per round, the kinds interleaved, 256 different datagrams of each cycled (random sources, destinations drawn from 4,096). The sFlow fast path (`walkSFlow`) reads a datagram of flow samples in place; goflow2 decodes every other datagram and is shown alone on the same sFlow datagrams.\n\n", per)
	fmt.Fprintf(b, "| datagram | ns a datagram | datagrams/s | records/s | allocations a datagram |\n|---|---:|---:|---:|---:|\n")
	var fast, slow float64
	for i, r := range res {
		ns := med(r.NsPerDg)
		fmt.Fprintf(b, "| %s | %.0f %s | %.0f | %.0f | %.1f |\n", r.Case, ns, span(r.NsPerDg), 1e9/ns, r.Records*1e9/ns, r.Allocs)
		switch i {
		case 0:
			fast = ns
		case 1:
			slow = ns
		}
	}
	if fast > 0 {
		fmt.Fprintf(b, "\nThe fast path takes an sFlow datagram in %.2f× the time goflow2 alone takes (%.0f against %.0f ns).\n\n", fast/slow, fast, slow)
	}
}

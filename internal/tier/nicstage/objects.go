// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
)

// Specs are the emulated NIC's objects as compiled, by name, for the
// kernel check (internal/control/kernel) to load and report on.
func Specs() map[string]func() (*ebpf.CollectionSpec, error) {
	return map[string]func() (*ebpf.CollectionSpec, error){
		"nic": loadNic, "nic_egress": loadNic_egress, "nicflow": loadNicflow,
	}
}

// twCtr is struct tw_ctr (bpf/lib/types.h), which bpf2go names once per
// object; the three share one layout, so each converts to nicTwCtr.
type twCtr interface {
	nicTwCtr | nicflowTwCtr | nic_egressTwCtr
}

// sumVerdicts reads a per-CPU array of tw_ctr indexed by verdict, names
// being the verdicts in their C enum's order, and sums each over CPUs:
// the stage, the flow table and the egress count their verdicts alike and
// report them as the data plane's or the NIC tier's counters. A failure
// says it was reading what.
func sumVerdicts[C twCtr, O datapath.Counter | tier.Counters](m *ebpf.Map, names []string, what string) (map[string]O, error) {
	out := make(map[string]O, len(names))
	for i, name := range names {
		var cs []C
		if err := m.Lookup(uint32(i), &cs); err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		var sum datapath.Counter
		for _, v := range cs {
			c := nicTwCtr(v)
			sum.Packets += c.Packets
			sum.Bytes += c.Bytes
		}
		out[name] = O(sum)
	}
	return out, nil
}

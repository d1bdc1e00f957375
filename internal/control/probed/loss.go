// SPDX-License-Identifier: Apache-2.0

package probed

import "github.com/tierwall/tierwall/internal/probe/export/ipfix"

// Loss is what the probe could not put in flow records, for the
// collectors: packets of flows the full software table refused (or could
// not parse), those flows, and the flows counted by the software table
// alone past the engine's budget. The software tier's counters are read
// from its maps; a read that fails reports the engine's part alone.
func (p *Probed) Loss() ipfix.Loss {
	l := ipfix.Loss{UntrackedFlows: p.Engine.Stats().UntrackedFlows}
	if st, err := p.SW.Stats(); err == nil {
		l.IgnoredPackets, l.RefusedFlows = st.Untracked, st.Refused
	}
	return l
}

// SPDX-License-Identifier: Apache-2.0

package xdp

import "fmt"

// Verdict names one of the program's counters (enum tw_probe_verdict).
// Three groups each partition the packets: the NIC's mark, the class
// (where the packet's counters went) and the outcome; the events at the end
// count things, not packets.
type Verdict probeTwProbeVerdict

const (
	VerdictMarkNone      = Verdict(probeTwProbeVerdictTW_PV_MARK_NONE)
	VerdictMarkHit       = Verdict(probeTwProbeVerdictTW_PV_MARK_HIT)
	VerdictMarkMiss      = Verdict(probeTwProbeVerdictTW_PV_MARK_MISS)
	VerdictMarkUnhandled = Verdict(probeTwProbeVerdictTW_PV_MARK_UNHANDLED)
	VerdictTracked       = Verdict(probeTwProbeVerdictTW_PV_TRACKED)
	VerdictNICCounted    = Verdict(probeTwProbeVerdictTW_PV_NIC_COUNTED)
	VerdictTableFull     = Verdict(probeTwProbeVerdictTW_PV_TABLE_FULL)
	VerdictNonIP         = Verdict(probeTwProbeVerdictTW_PV_NON_IP)
	VerdictMalformed     = Verdict(probeTwProbeVerdictTW_PV_MALFORMED)
	VerdictFragment      = Verdict(probeTwProbeVerdictTW_PV_FRAGMENT)
	VerdictConsumed      = Verdict(probeTwProbeVerdictTW_PV_CONSUMED)
	VerdictForward       = Verdict(probeTwProbeVerdictTW_PV_FORWARD)
	VerdictDiscard       = Verdict(probeTwProbeVerdictTW_PV_DISCARD)
	VerdictTxError       = Verdict(probeTwProbeVerdictTW_PV_TX_ERROR)
	VerdictFlowNew       = Verdict(probeTwProbeVerdictTW_PV_FLOW_NEW)
	VerdictRefused       = Verdict(probeTwProbeVerdictTW_PV_REFUSED)
	VerdictDPISent       = Verdict(probeTwProbeVerdictTW_PV_DPI_SENT)
	VerdictDPILost       = Verdict(probeTwProbeVerdictTW_PV_DPI_LOST)
	NumVerdicts          = int(probeTwProbeVerdictTW_PV_MAX)
)

var verdictNames = [NumVerdicts]string{
	VerdictMarkNone:      "mark_none",
	VerdictMarkHit:       "mark_hit",
	VerdictMarkMiss:      "mark_miss",
	VerdictMarkUnhandled: "mark_unhandled",
	VerdictTracked:       "tracked",
	VerdictNICCounted:    "nic_counted",
	VerdictTableFull:     "table_full",
	VerdictNonIP:         "non_ip",
	VerdictMalformed:     "malformed",
	VerdictFragment:      "fragment",
	VerdictConsumed:      "consumed",
	VerdictForward:       "forward",
	VerdictDiscard:       "discard",
	VerdictTxError:       "tx_error",
	VerdictFlowNew:       "flow_new",
	VerdictRefused:       "refused",
	VerdictDPISent:       "dpi_sent",
	VerdictDPILost:       "dpi_lost",
}

// String is the counter's name in metrics.
func (v Verdict) String() string {
	if int(v) < NumVerdicts {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint32(v))
}

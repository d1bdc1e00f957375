// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Reason names one of the program's counters (enum tw_sp_reason): every
// packet is counted under exactly one.
type Reason synproxyTwSpReason

const (
	// ReasonSynAnswered: a SYN answered with a cookie SYN-ACK (XDP_TX).
	ReasonSynAnswered = Reason(synproxyTwSpReasonTW_SP_SYN_ANSWERED)
	// ReasonAckValid: an ACK of an unknown flow with a valid cookie,
	// passed to SYNPROXY.
	ReasonAckValid = Reason(synproxyTwSpReasonTW_SP_ACK_VALID)
	// ReasonAckInvalid: an ACK of an unknown flow with a bad cookie,
	// dropped.
	ReasonAckInvalid = Reason(synproxyTwSpReasonTW_SP_ACK_INVALID)
	// ReasonConntrackPass: a segment of a flow conntrack knows, passed.
	ReasonConntrackPass = Reason(synproxyTwSpReasonTW_SP_CT_PASS)
	// ReasonDroppedOther: RST, FIN, SYN-ACK or another non-SYN, non-ACK
	// segment of an unknown flow, dropped.
	ReasonDroppedOther = Reason(synproxyTwSpReasonTW_SP_DROP_OTHER)
	// ReasonSynUnfit: a SYN that could not be answered (TCP header
	// beyond the datagram, no room to grow the frame), dropped.
	ReasonSynUnfit = Reason(synproxyTwSpReasonTW_SP_SYN_UNFIT)
	// ReasonConntrackError: the conntrack lookup failed, dropped.
	ReasonConntrackError = Reason(synproxyTwSpReasonTW_SP_CT_ERROR)
	// ReasonMalformed: the parser refused the frame, passed.
	ReasonMalformed = Reason(synproxyTwSpReasonTW_SP_MALFORMED)
	// ReasonNoTCP: not TCP, or a later fragment, passed.
	ReasonNoTCP = Reason(synproxyTwSpReasonTW_SP_NO_TCP)
	// NumReasons is the number of counters.
	NumReasons = int(synproxyTwSpReasonTW_SP_MAX)
)

var reasonNames = [NumReasons]string{
	ReasonSynAnswered:    "syn_answered",
	ReasonAckValid:       "ack_valid",
	ReasonAckInvalid:     "ack_invalid",
	ReasonConntrackPass:  "conntrack_pass",
	ReasonDroppedOther:   "dropped_other",
	ReasonSynUnfit:       "syn_unfit",
	ReasonConntrackError: "conntrack_error",
	ReasonMalformed:      "malformed",
	ReasonNoTCP:          "no_tcp",
}

// String is the counter's name in metrics.
func (r Reason) String() string {
	if int(r) < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// Dropped tells whether the program drops the packets counted under r.
func (r Reason) Dropped() bool {
	switch r {
	case ReasonAckInvalid, ReasonDroppedOther, ReasonSynUnfit, ReasonConntrackError:
		return true
	}
	return false
}

// Stats are the program's counters summed over CPUs, indexed by Reason.
type Stats [NumReasons]datapath.Counter

// Get returns the counter of reason r.
func (s *Stats) Get(r Reason) datapath.Counter { return s[r] }

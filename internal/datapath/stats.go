// SPDX-License-Identifier: Apache-2.0

package datapath

import "fmt"

const layoutVersion = filterTwLayoutTW_LAYOUT_VERSION

// Counter is a packets/bytes pair summed over CPUs.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// reasonNames names the verdict reasons as metrics and the CLI show them,
// indexed by the generated tw_reason constants.
var reasonNames = map[filterTwReason]string{
	filterTwReasonTW_R_PASS:         "pass",
	filterTwReasonTW_R_DROP_EXACT:   "drop_exact",
	filterTwReasonTW_R_DROP_PREFIX:  "drop_prefix",
	filterTwReasonTW_R_ALLOW:        "allowlisted",
	filterTwReasonTW_R_NON_IP:       "non_ip",
	filterTwReasonTW_R_ETH_TRUNC:    "malformed_eth_trunc",
	filterTwReasonTW_R_VLAN_TRUNC:   "malformed_vlan_trunc",
	filterTwReasonTW_R_VLAN_DEPTH:   "malformed_vlan_depth",
	filterTwReasonTW_R_IP4TRUNC:     "malformed_ip4_trunc",
	filterTwReasonTW_R_IP4VERSION:   "malformed_ip4_version",
	filterTwReasonTW_R_IP4IHL:       "malformed_ip4_ihl",
	filterTwReasonTW_R_IP4LEN:       "malformed_ip4_len",
	filterTwReasonTW_R_IP6TRUNC:     "malformed_ip6_trunc",
	filterTwReasonTW_R_IP6VERSION:   "malformed_ip6_version",
	filterTwReasonTW_R_IP6LEN:       "malformed_ip6_len",
	filterTwReasonTW_R_IP6EXT_TRUNC: "malformed_ip6_ext_trunc",
	filterTwReasonTW_R_IP6EXT_LIMIT: "malformed_ip6_ext_limit",
	filterTwReasonTW_R_L4TRUNC:      "malformed_l4_trunc",
	filterTwReasonTW_R_NON_IP_ARP:   "non_ip_arp",
	filterTwReasonTW_R_NON_IP_MPLS:  "non_ip_mpls",
	filterTwReasonTW_R_NON_IP_PPPOE: "non_ip_pppoe",

	filterTwReasonTW_R_DROP_FLOW:        "drop_flow",
	filterTwReasonTW_R_DROP_FLOW_RATE:   "drop_flow_rate",
	filterTwReasonTW_R_PASS_KNOWN_GOOD:  "pass_known_good",
	filterTwReasonTW_R_SYNPROXY_MISSING: "synproxy_missing",

	filterTwReasonTW_R_DROP_PROVISIONAL: "drop_provisional",
	filterTwReasonTW_R_PASS_PROVISIONAL: "pass_provisional",

	filterTwReasonTW_R_DROP_SYN_GUARD: "drop_syn_guard",
}

// passing are the reasons whose packets tw_verdict passes (tw_action in
// bpf/lib/stats.h); every other reason drops. non_ip counts the non-IP
// traffic outside the ARP, MPLS and PPPoE classes. pass includes what a
// rate-limit flow rule admitted; synproxy_missing is SYN-cookie traffic
// passed to the kernel because no SYN proxy is loaded (what the proxy
// handles is counted by the proxy and by the rule's counters);
// pass_provisional is a heavy hitter's packet in monitor-only mode.
var passing = map[string]bool{
	"pass": true, "allowlisted": true,
	"non_ip": true, "non_ip_arp": true, "non_ip_mpls": true, "non_ip_pppoe": true,
	"pass_known_good": true, "synproxy_missing": true, "pass_provisional": true,
}

// Reasons lists every verdict reason name in data-plane order.
func Reasons() []string {
	out := make([]string, filterTwReasonTW_R_MAX)
	for r := filterTwReason(0); r < filterTwReasonTW_R_MAX; r++ {
		out[r] = reasonNames[r]
	}
	return out
}

// IsDrop tells whether packets counted under a reason were dropped.
func IsDrop(reason string) bool { return !passing[reason] }

// Occupancy is how full one table is.
type Occupancy struct {
	Entries  uint32 `json:"entries"`
	Capacity uint32 `json:"capacity"`
}

// Stats is the data plane's global state: one counter per verdict reason
// and the occupancy of every table.
type Stats struct {
	Interface       string               `json:"interface"`
	Mode            string               `json:"mode"`
	Verdicts        map[string]Counter   `json:"verdicts"`
	Tables          map[string]Occupancy `json:"tables"`
	FeatureOverflow uint64               `json:"feature_overflow_packets"`
}

// Stats reads the verdict counters and table occupancy.
func (d *Datapath) Stats() (*Stats, error) {
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	s := &Stats{Interface: d.Iface, Mode: Mode(cfg.XdpMode).String(), Verdicts: map[string]Counter{}}
	// Every reason's counters in one batch (a lookup each was 60 system
	// calls a read, each interval).
	per, ncpu, err := readPerCPUArray[filterTwCtr](d.maps.TwVerdicts)
	if err != nil {
		return nil, fmt.Errorf("reading the verdict counters: %w", err)
	}
	for r := filterTwReason(0); r < filterTwReasonTW_R_MAX; r++ {
		var c Counter
		for _, v := range per[int(r)*ncpu : int(r+1)*ncpu] {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
		}
		s.Verdicts[reasonNames[r]] = c
	}
	s.Tables = map[string]Occupancy{
		"exact4":  {cfg.Exact4N, cfg.Exact4Cap},
		"exact6":  {cfg.Exact6N, cfg.Exact6Cap},
		"prefix":  {cfg.Pfx4N + cfg.Pfx6N, d.sizes.pfx},
		"allow":   {cfg.Allow4N + cfg.Allow6N, d.sizes.allow},
		"feature": {0, d.sizes.feat},
		"flow":    {cfg.FruleN, uint32(frulesMax)},
	}
	var fs []filterTwFeatStats
	if err := d.maps.TwFstats.Lookup(uint32(0), &fs); err != nil {
		return nil, fmt.Errorf("reading feature stats: %w", err)
	}
	for _, v := range fs {
		s.FeatureOverflow += v.Overflow
	}
	return s, nil
}

// SPDX-License-Identifier: Apache-2.0

package bgp

// String is a FlowSpec rule as events and the CLI show it: a source ban
// as "src 203.0.113.7/32 dst 192.0.2.0/24 drop", a flow rule as
// rule.FlowRule shows it.
func (f Flow) String() string {
	if !f.Src.IsValid() {
		return f.FlowRule.String()
	}
	s := "src " + f.Src.String()
	if f.Dst.IsValid() {
		s += " dst " + f.Dst.String()
	}
	return s + " " + f.Action.String()
}

// String is a route as events and the CLI show it; it is also the
// route's identity (two routes with the same string are the same
// announcement).
func (r Route) String() string {
	if r.Kind == RTBH {
		return "rtbh " + r.Prefix.String()
	}
	return "flowspec " + r.Flow.String()
}

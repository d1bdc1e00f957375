// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"fmt"
	"strconv"
	"strings"
)

// FlowSpec component types (RFC 8955 §4.2.2, RFC 8956 §3) and their
// canonical keywords.
var componentNames = map[int]string{
	1: "dst", 2: "src", 3: "proto", 4: "port", 5: "dport", 6: "sport",
	7: "icmp-type", 8: "icmp-code", 9: "tcp-flags", 10: "len", 11: "dscp",
	12: "frag", 13: "flow-label",
}

// Operator byte bits (RFC 8955 §4.2.1).
const (
	opEnd   = 0x80
	opAnd   = 0x40
	opLt    = 0x04
	opGt    = 0x02
	opEq    = 0x01
	opNot   = 0x02 // bitmask
	opMatch = 0x01 // bitmask
)

func isBitmask(typ int) bool { return typ == 9 || typ == 12 }

// numericTerm is one numeric operator term in canonical form.
func numericTerm(op byte, v uint64) string {
	var o string
	switch op & (opLt | opGt | opEq) {
	case 0:
		return "false"
	case opEq:
		o = "="
	case opGt:
		o = ">"
	case opGt | opEq:
		o = ">="
	case opLt:
		o = "<"
	case opLt | opEq:
		o = "<="
	case opLt | opGt:
		o = "!="
	case opLt | opGt | opEq:
		return "true"
	}
	return o + strconv.FormatUint(v, 10)
}

// bitmaskTerm is one bitmask operator term in canonical form.
func bitmaskTerm(op byte, v uint64) string {
	pre := ""
	switch op & (opNot | opMatch) {
	case opMatch:
		pre = "="
	case opNot:
		pre = "!"
	case opNot | opMatch:
		pre = "!="
	}
	return fmt.Sprintf("%s0x%x", pre, v)
}

// terms joins operator terms: "&" before a term with the AND bit, ","
// (OR) before one without.
func terms(typ int, ops []byte, vals []uint64) string {
	var b strings.Builder
	for i := range ops {
		if i > 0 {
			if ops[i]&opAnd != 0 {
				b.WriteByte('&')
			} else {
				b.WriteByte(',')
			}
		}
		if isBitmask(typ) {
			b.WriteString(bitmaskTerm(ops[i], vals[i]))
		} else {
			b.WriteString(numericTerm(ops[i], vals[i]))
		}
	}
	return b.String()
}

// wellKnown maps FRR's names of well-known communities (RFC 1997, 7999,
// 8326, 7611) to numbers.
var wellKnown = map[string]string{
	"graceful-shutdown": "65535:0", "accept-own": "65535:1",
	"route-filter-translated-v4": "65535:2", "route-filter-v4": "65535:3",
	"route-filter-translated-v6": "65535:4", "route-filter-v6": "65535:5",
	"llgr-stale": "65535:6", "no-llgr": "65535:7", "accept-own-nexthop": "65535:8",
	"blackhole": Blackhole, "no-export": NoExport, "no-advertise": "65535:65282",
	"local-AS": "65535:65283", "no-peer": "65535:65284",
}

// community is a 32-bit community as "ASN:VALUE".
func community(c uint32) string { return fmt.Sprintf("%d:%d", c>>16, c&0xffff) }

// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"encoding/binary"
	"net/netip"
)

// These mirror tw_hash4/tw_hash6 in bpf/lib/table.h bit for bit: user space
// places each rule where the data plane will probe for it. Addresses are
// loaded as native-endian words of their network-order bytes, as the BPF
// program loads them from the packet.

func mix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x7feb352d
	h ^= h >> 15
	h *= 0x846ca68b
	h ^= h >> 16
	return h
}

func hash4(a netip.Addr, seed uint32) uint32 {
	b := a.As4()
	return mix32(binary.NativeEndian.Uint32(b[:]) ^ seed)
}

func hash6(a netip.Addr, seed uint32) uint32 {
	b := a.As16()
	w := func(i int) uint64 { return uint64(binary.NativeEndian.Uint32(b[4*i:])) }
	s := uint64(seed)
	x := (w(0)<<32 | w(1)) ^ (s<<32 | s)
	y := (w(2)<<32 | w(3)) ^ (uint64(^seed)<<32 | s)
	h := x*0x9E3779B97F4A7C15 + y*0xC2B2AE3D27D4EB4F
	return mix32(uint32(h>>32) ^ uint32(h))
}

// featSeed keys the feature hash (TW_FEAT_SEED_WORDS words): random per
// created state, kept in tw_config so that every program and every
// snapshot of the state use it. An alias, so a tw_config of another length
// does not compile.
type featSeed = [10]uint32

// featHash mirrors tw_feat_hash in bpf/lib/features.h: NH over the key's
// nine 32-bit words, folded, then mix32. Snapshot merging uses it to walk
// its index in the order the regions are laid out, which keeps the merge
// of a 300K-key buffer sequential in memory.
func featHash(k *filterTwFeatKey, s *featSeed) uint32 {
	var b [36]byte
	b[0], b[1] = k.Family, k.Proto
	binary.NativeEndian.PutUint16(b[2:], k.Pad)
	copy(b[4:20], k.Src[:])
	copy(b[20:36], k.Dst[:])
	m := func(i int) uint32 { return binary.NativeEndian.Uint32(b[4*i:]) }
	nh := func(i int) uint64 { return uint64(m(i)+s[i]) * uint64(m(i+1)+s[i+1]) }
	h := nh(0) + nh(2) + nh(4) + nh(6) + uint64(m(8)+s[8])*uint64(s[9]|1)
	return mix32(uint32(h>>32) ^ uint32(h))
}

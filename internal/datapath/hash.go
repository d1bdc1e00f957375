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

// featHash mirrors tw_feat_hash in bpf/lib/features.h. Snapshot merging
// uses it to walk its index in the order the regions are laid out, which
// keeps the merge of a 300K-key buffer sequential in memory.
func featHash(k *filterTwFeatKey) uint32 {
	var b [36]byte
	b[0], b[1] = k.Family, k.Proto
	binary.NativeEndian.PutUint16(b[2:], k.Pad)
	copy(b[4:20], k.Src[:])
	copy(b[20:36], k.Dst[:])
	w := func(i int) uint64 { return binary.NativeEndian.Uint64(b[8*i:]) }
	a := w(0) ^ (w(2) * 0x9E3779B97F4A7C15)
	c := w(1) ^ (w(3) * 0xC2B2AE3D27D4EB4F)
	h := a*0xFF51AFD7ED558CCD + c + uint64(binary.NativeEndian.Uint32(b[32:]))
	return mix32(uint32(h>>32) ^ uint32(h))
}

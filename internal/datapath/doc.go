// Package datapath is tierwall's software tier in the kernel and the only
// package that imports cilium/ebpf. It loads the XDP filter (bpf/), attaches
// it with a bpf_link, pins maps and link under one bpffs directory per
// interface, re-adopts that pinned state on the next start, and exposes the
// maps only through domain verbs: Block, Unblock, Allow, Disallow, Rules,
// Stats and Snapshot.
//
// Every verb that changes state runs under an exclusive file lock per
// interface, so a CLI and a daemon never interleave table updates.
package datapath

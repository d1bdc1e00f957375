// SPDX-License-Identifier: Apache-2.0

// Package datapath is tierwall's software tier in the kernel and, with its
// subpackages, the only code that imports cilium/ebpf. It loads the XDP
// filter (bpf/), attaches it with a bpf_link, pins maps and link under one
// bpffs directory per interface, re-adopts that pinned state on the next
// start, and exposes the maps only through domain verbs: Block, Unblock,
// Allow, Disallow, Blocked, Allowed, RuleCounters, Stats and Snapshot. The
// emulated NIC stage, the generator and the benchmark programs live in
// subpackages beside it.
//
// Every verb that changes state runs under an exclusive file lock per
// interface, so a CLI and a daemon never interleave table updates.
package datapath

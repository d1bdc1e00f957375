// SPDX-License-Identifier: Apache-2.0

// Package datapath is tierwall's software tier in the kernel: the XDP
// filter, its kernel-facing package (the other tiers have their own: the
// emulated NIC in internal/tier/nicstage, the probe's and the SYN proxy's
// XDP parts in internal/probe/xdp and internal/synproxy/xdp). It loads the
// filter (bpf/filter/), attaches it with a bpf_link, pins maps and link under one
// bpffs directory per interface, re-adopts that pinned state on the next
// start, and exposes the maps only through domain verbs: Block, Unblock,
// Allow, Disallow, Blocked, Allowed, RuleCounters, Stats and Snapshot.
//
// Every verb that changes state runs under an exclusive file lock per
// interface, so a CLI and a daemon never interleave table updates.
package datapath

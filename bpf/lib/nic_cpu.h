/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* nic_cpu.h - the emulated SmartNIC's CPU (xdp_nic.c): the filter it
 * runs, by tail call, and the rate that CPU can sustain. */
#ifndef TW_NIC_CPU_H
#define TW_NIC_CPU_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Set before load: CPUs sharing the NIC CPU rate. */
volatile const __u32 tw_nic_ncpu = 1;

/* The filter program the NIC CPU runs (slot 0), loaded with its own maps
 * by internal/datapath and inserted here instead of attached to a link. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_nic_cpu SEC(".maps");

/* Per-CPU token bucket for cpu_rate_pps: credit in nanopackets. */
struct tw_nic_bucket {
	__u64 credit;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_nic_bucket);
	__uint(max_entries, 1);
} tw_nic_bucket SEC(".maps");

#endif

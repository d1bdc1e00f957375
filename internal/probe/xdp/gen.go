// SPDX-License-Identifier: Apache-2.0

package xdp

// The probe's object and its Go bindings are generated here and committed
// (see internal/testbed/gen.go). -mcpu=v3 because the program needs BPF
// atomics that return a value (compare-and-swap of a flow's sample count)
// and atomic OR (TCP flags), which v1, bpf2go's default, cannot express;
// the kernels that have the probe's other needs (ring buffer,
// bpf_xdp_load_bytes, syscall programs) all run v3.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include -mcpu=v3" -target bpfel -type tw_flow_key -type tw_flow -type tw_flow_meta -type tw_dpi_sample -type tw_flow_mark -type tw_flow_state -type tw_flow_action -type tw_probe_verdict -type tw_probe_ctl -type tw_probe_ctl_ret -type tw_probe_op -type tw_probe_op_kind -type tw_probe_ops_limit -type tw_probe_batch -type tw_ctr probe ../../../bpf/probe/xdp_probe.c

// SPDX-License-Identifier: Apache-2.0

package nicstage

// The NIC stage's objects and their Go bindings are generated here and
// committed (see internal/testbed/gen.go). Flow mode needs BPF ISA v3
// (atomic fetch-or and compare-and-swap on shared entries, Linux 5.12;
// its syscall program needs 5.14), passed after the common flags.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_nic_key -type tw_nic_rule -type tw_nic_config -type tw_nic_action -type tw_nic_verdict -type tw_nic_flags -type tw_frule -type tw_nic_pol_set nic ../../../bpf/nic/xdp_nic.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_flow_key -type tw_nicflow_entry -type tw_nicflow_ref -type tw_nicflow_state -type tw_nicflow_verdict nicflow ../../../bpf/nic/xdp_nicflow.c -- -mcpu=v3
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_lpm4_key -type tw_lpm6_key -type tw_ctr nic_egress ../../../bpf/nic/xdp_nic_egress.c

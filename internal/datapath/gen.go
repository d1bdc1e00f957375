// SPDX-License-Identifier: Apache-2.0

package datapath

// The BPF objects and their Go bindings are generated here and committed;
// CI regenerates them and fails when the result differs. Types shared with
// C come from bpf/lib/types.h and bpf/lib/consts.h through -type. The C
// flags are the common ones of bpf/include/README.md: only the headers
// vendored there, never the host's. The NIC stage, the generator and the
// benchmark programs are generated in their own packages the same way.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel -type tw_exact4 -type tw_exact6 -type tw_ctr -type tw_hot -type tw_lpm4_key -type tw_lpm6_key -type tw_lpm_val -type tw_config -type tw_feat_key -type tw_feat_slot -type tw_feat_stats -type tw_reason -type tw_slot_state -type tw_layout -type tw_frule -type tw_frule_set -type tw_fctr -type tw_fbucket -type tw_good -type tw_frule_action -type tw_jmp_slot -type tw_hh_config -type tw_hh_state -type tw_hh_pcpu -type tw_hh_marks -type tw_hh_bucket -type tw_prov -type tw_hh_event -type tw_hh_stats -type tw_hh_kind -type tw_prov_flag -type tw_hh_limit filter ../../bpf/filter/xdp_filter.c

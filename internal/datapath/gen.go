package datapath

// The BPF objects and their Go bindings are generated here and committed;
// CI regenerates them and fails when the result differs. Types shared with
// C come from bpf/lib/types.h and bpf/lib/consts.h through -type. The C
// flags are the common ones of bpf/include/README.md: only the headers
// vendored there, never the host's.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel -type tw_exact4 -type tw_exact6 -type tw_ctr -type tw_lpm4_key -type tw_lpm6_key -type tw_lpm_val -type tw_config -type tw_feat_key -type tw_feat_slot -type tw_feat_stats -type tw_reason -type tw_slot_state -type tw_layout filter ../../bpf/xdp_filter.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel -type tw_nic_key -type tw_nic_rule -type tw_nic_config -type tw_nic_action -type tw_nic_verdict -type tw_nic_flags nic ../../bpf/xdp_nic.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel benchwrap ../../bpf/bench_wrap.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel benchbase ../../bpf/bench_baseline.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel -type tw_gen_config -type tw_gen_addr -type tw_gen_state -type tw_gen_mode trafgen ../../bpf/xdp_gen.c

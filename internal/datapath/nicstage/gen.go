package nicstage

// The NIC stage's object and its Go bindings are generated here and
// committed (see internal/datapath/gen.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_nic_key -type tw_nic_rule -type tw_nic_config -type tw_nic_action -type tw_nic_verdict -type tw_nic_flags nic ../../../bpf/xdp_nic.c

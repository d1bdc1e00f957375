// SPDX-License-Identifier: Apache-2.0

package gen

// The generator's object and bindings are generated here and committed
// (see internal/testbed/gen.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_gen_config -type tw_gen_addr -type tw_gen_state -type tw_gen_mode -type tw_nic_key trafgen ../../../bpf/testbed/xdp_gen.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_gf_pkt -type tw_gf_payload -type tw_gf_state genflow ../../../bpf/testbed/xdp_genflow.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel oracle ../../../bpf/testbed/xdp_oracle.c

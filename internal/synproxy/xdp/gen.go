// SPDX-License-Identifier: Apache-2.0

package xdp

// The SYN-cookie stage's object and its Go bindings are generated here and
// committed (see internal/testbed/gen.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel -type tw_sp_reason -type tw_ctr synproxy ../../../bpf/synproxy/xdp_synproxy.c

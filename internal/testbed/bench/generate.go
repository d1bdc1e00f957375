// SPDX-License-Identifier: Apache-2.0

package bench

// The benchmark programs and bindings are generated here and committed
// (see internal/testbed/gen.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel benchwrap ../../../bpf/testbed/bench_wrap.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel benchbase ../../../bpf/testbed/bench_baseline.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel benchparts ../../../bpf/testbed/bench_parts.c

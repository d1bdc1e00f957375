#!/usr/bin/env bash
# make lint: every bpf2go go:generate line compiles with the common C flags,
# BPF_CFLAGS from the Makefile followed by -I<root>/bpf/include, <root> being
# the path from that file's directory to the repository root
# (bpf/include/README.md), optionally followed by -mcpu=vN for a program
# that needs newer instructions than bpf2go's default v1 (the flow probe's
# atomics). Catches a copied line left at the wrong depth or pointing at the
# host's headers.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BPF_CFLAGS:?BPF_CFLAGS not set (run through make lint)}"

bad=0
while IFS= read -r hit; do
	file="${hit%%:*}" rest="${hit#*:}"
	line="${rest%%:*}" text="${rest#*:}"
	root="$(realpath --relative-to="$(dirname "$file")" .)"
	want="-cflags \"$BPF_CFLAGS -I$root/bpf/include\""
	cpu="-cflags \"$BPF_CFLAGS -I$root/bpf/include -mcpu=v[1-4]\""
	n="$(grep -o -- '-cflags' <<<"$text" | wc -l)"
	if [[ "$text" != *"$want "* && "$text" != *$cpu\ * ]] || [ "$n" -ne 1 ]; then
		echo "$file:$line: bpf2go needs exactly $want" >&2
		bad=1
	fi
done < <(git grep -n --untracked -e '^//go:generate.*bpf2go' -- '*.go' || true)
exit $bad

#!/usr/bin/env bash
# Refreshes the vendored BPF headers from the pinned Debian packages (see
# README.md). Downloads exactly LIBBPF_DEB and LINUX_LIBC_DEV_DEB with
# apt-get download (no root needed, nothing installed), then
#   - copies the verbatim headers over the vendored ones, and
#   - compares every definition kept in the trimmed headers with the same
#     definition in the package, printing a diff where upstream differs.
# Afterwards: review git diff, update the versions in README.md and the
# trimmed headers' notes, run make generate and commit the result.
#
#   bash bpf/include/update.sh            refresh and compare
#   bash bpf/include/update.sh --check    compare only, change nothing
set -euo pipefail

LIBBPF_DEB="1:1.1.2-0+deb12u1"
LINUX_LIBC_DEV_DEB="6.1.192-2"

here="$(cd "$(dirname "$0")" && pwd)"
check=0
[ "${1:-}" = "--check" ] && check=1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -q "libbpf-dev=$LIBBPF_DEB" "linux-libc-dev=$LINUX_LIBC_DEV_DEB" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
for deb in "$tmp"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
done
inc="$tmp/root/usr/include"
[ -f "$inc/bpf/bpf_helpers.h" ] && [ -f "$inc/linux/bpf.h" ] || {
	echo "update.sh: could not fetch libbpf-dev=$LIBBPF_DEB and linux-libc-dev=$LINUX_LIBC_DEV_DEB" >&2
	exit 1
}

status=0

# Verbatim copies.
for f in bpf/bpf_helpers.h bpf/bpf_helper_defs.h bpf/bpf_endian.h linux/bpf.h linux/bpf_common.h; do
	if ! cmp -s "$inc/$f" "$here/$f"; then
		if [ $check = 1 ]; then
			echo "differs from the package: $f"
			status=1
		else
			cp "$inc/$f" "$here/$f"
			echo "updated $f"
		fi
	fi
done

# def FILE START: the definition beginning with the line START, through its
# closing brace, without libc-compat (__UAPI_DEF_*) conditionals.
def() {
	awk -v start="$2" '
		!on && $0 == start { on = 1 }
		!on { next }
		/^#if __UAPI_DEF/ { skip[++d] = 1; next }
		/^#if/ { skip[++d] = 0 }
		/^#endif/ { if (skip[d--]) next }
		{ print }
		/^}/ { exit }
	' "$1"
}

# Trimmed copies: each kept definition must still match upstream.
compare() { # vendored upstream start-line
	if ! diff -u --label "package: $2" --label "vendored: $1" \
		<(def "$inc/$2" "$3") <(def "$here/$1" "$3"); then
		status=1
	fi
}
compare linux/if_ether.h linux/if_ether.h 'struct ethhdr {'
compare linux/ip.h linux/ip.h 'struct iphdr {'
compare linux/ipv6.h linux/ipv6.h 'struct ipv6hdr {'
compare linux/in6.h linux/in6.h 'struct in6_addr {'
compare linux/in.h linux/in.h 'enum {'
compare linux/tcp.h linux/tcp.h 'struct tcphdr {'
compare linux/udp.h linux/udp.h 'struct udphdr {'
# Single-line macros and typedefs of the trimmed copies.
for pair in linux/if_ether.h:linux/if_ether.h linux/in6.h:linux/in6.h \
	linux/types.h:linux/types.h linux/types.h:asm-generic/int-ll64.h \
	linux/stddef.h:linux/stddef.h; do
	v="${pair%%:*}" u="${pair#*:}"
	case "$u" in
	asm-generic/*) pat='^(__extension__ )?typedef (__signed__|unsigned) ' ;;
	linux/types.h) pat='^(typedef __u|#define __(aligned|bitwise))' ;;
	linux/stddef.h) pat='^#define __(always_inline|struct_group_tag)' ;;
	*) pat='^#define ' ;;
	esac
	grep -E "$pat" "$here/$v" | while IFS= read -r line; do
		case "$line" in "#define s6_addr"*) continue ;; esac
		grep -Fxq -- "$line" "$inc/$u" || { echo "not in package $u: $line"; exit 1; }
	done || status=1
done

if [ $status = 0 ]; then
	echo "vendored headers match libbpf-dev $LIBBPF_DEB and linux-libc-dev $LINUX_LIBC_DEV_DEB"
else
	echo "vendored headers differ from libbpf-dev $LIBBPF_DEB and linux-libc-dev $LINUX_LIBC_DEV_DEB (above)" >&2
fi
exit $status

#!/usr/bin/env bash
# First tierwall demo: two network namespaces joined by veth, the filter on
# the receiving side, pings from blocked and clean IPv4/IPv6 sources, the
# counters, then cleanup. Everything it creates is prefixed "twdemo".
set -euo pipefail
cd "$(dirname "$0")/.."
T="./bin/tierwall --netns twdemo-host"
TX="ip netns exec twdemo-peer"

cleanup() {
	./bin/tierwall --netns twdemo-host detach twdemo1 >/dev/null 2>&1 || true
	ip netns del twdemo-peer 2>/dev/null || true
	ip netns del twdemo-host 2>/dev/null || true
}
trap cleanup EXIT
[ "${TWDEMO_KEEP:-}" = 1 ] && trap - EXIT
cleanup

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "lab: namespaces twdemo-peer -> twdemo-host over veth"
ip netns add twdemo-peer
ip netns add twdemo-host
ip link add twdemo0 netns twdemo-peer type veth peer name twdemo1 netns twdemo-host
ip -n twdemo-host addr add 10.250.0.2/24 dev twdemo1
ip -n twdemo-host addr add fd00:250::2/64 dev twdemo1 nodad
ip -n twdemo-peer addr add 10.250.0.1/24 dev twdemo0
ip -n twdemo-peer addr add fd00:250::1/64 dev twdemo0 nodad
for a in 192.0.2.1 192.0.2.2 198.51.100.7; do ip -n twdemo-peer addr add $a/32 dev twdemo0; done
for a in 2001:db8::1 2001:db8::2; do ip -n twdemo-peer addr add $a/128 dev twdemo0 nodad; done
ip -n twdemo-peer link set twdemo0 up
ip -n twdemo-host link set twdemo1 up
ip -n twdemo-host route add 192.0.2.0/24 dev twdemo1
ip -n twdemo-host route add 198.51.100.0/24 dev twdemo1
ip -n twdemo-host route add 2001:db8::/64 dev twdemo1

step "attach the filter and block 192.0.2.1, 198.51.100.0/24 and 2001:db8::1"
$T attach twdemo1
$T block add 192.0.2.1 198.51.100.0/24 2001:db8::1
echo "(the tierwall process has exited; the pinned filter keeps running)"

ping_from() {
	local src=$1 dst=$2
	if $TX ping -q -c 3 -i 0.2 -W 1 -I "$src" "$dst" >/dev/null 2>&1; then
		printf '  %-14s -> %-12s replies   (passed)\n' "$src" "$dst"
	else
		printf '  %-14s -> %-12s no reply  (dropped)\n' "$src" "$dst"
	fi
}
step "traffic"
ping_from 192.0.2.1 10.250.0.2
ping_from 192.0.2.2 10.250.0.2
ping_from 198.51.100.7 10.250.0.2
ping_from 10.250.0.1 10.250.0.2
ping_from 2001:db8::1 fd00:250::2
ping_from 2001:db8::2 fd00:250::2

step "tierwall block list"
$T block list
step "tierwall stats"
$T stats
step "cleanup"

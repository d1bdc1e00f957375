#!/bin/sh
# Captures the golden netlink requests of the mitigation table (add-*.cmd,
# del-*.cmd and their .hex): the first message iproute2's tc sends for each
# command, read with strace. The kernel may refuse them (no cls_flower, no
# clsact): tc sends them all the same. IPv4 rules are at priority 0xBEEF
# (48879), IPv6 ones at 0xBEEE (48878): one protocol per priority. Run as
# root: sh capture-mitigation.sh
set -e
cd "$(dirname "$0")"
dev=twg0
ip link del $dev 2>/dev/null || true
ip link add $dev type veth peer name twg1
trap 'ip link del $dev' EXIT
capture() {
	name=$1; shift
	echo "tc $*" > "$name.cmd"
	strace -f -e trace=sendmsg -e write=3 tc "$@" 2>&1 >/dev/null |
		awk '/^ \* [0-9]+ bytes in buffer/ {n++}
		n==1 && /^ \| [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]  / {
			for (i=3;i<=18;i++) if ($i ~ /^[0-9a-f][0-9a-f]$/) printf "%s", $i }' > "$name.hex"
	echo >> "$name.hex"
}
c=7469657277616c6c # "tierwall"
capture add-src4 filter add dev $dev ingress protocol ip prio 48879 handle 7 flower skip_sw src_ip 192.0.2.7 action drop cookie $c
capture add-src6 filter add dev $dev ingress protocol ipv6 prio 48878 handle 8 flower skip_sw src_ip 2001:db8::7 action drop cookie $c
capture add-flow4 filter add dev $dev ingress protocol ip prio 48879 handle 9 flower skip_sw ip_proto tcp src_ip 10.0.0.1 dst_ip 10.0.0.2 src_port 40000 dst_port 443 action pass cookie $c
capture add-flow6 filter add dev $dev ingress protocol ipv6 prio 48878 handle 10 flower skip_sw ip_proto udp src_ip 2001:db8::1 dst_ip 2001:db8::2 src_port 5353 dst_port 53 action pass cookie $c
capture del-src4 filter del dev $dev ingress protocol ip prio 48879 handle 7 flower
capture del-src6 filter del dev $dev ingress protocol ipv6 prio 48878 handle 8 flower

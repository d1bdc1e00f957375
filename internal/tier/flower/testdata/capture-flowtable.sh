#!/bin/sh
# Captures the golden netlink requests of the flow table (ft-*.cmd,
# ft-*.hex): the first message iproute2's tc sends for each command, read
# with strace. The kernel may refuse them (no cls_flower, no clsact): tc
# sends them all the same. Run as root: sh capture-flowtable.sh
set -e
cd "$(dirname "$0")"
dev=twfg0
ip link del $dev 2>/dev/null || true
ip link add $dev type veth peer name twfg1
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
# Cookies: "tierwall" and the flow id, big-endian.
c7=7469657277616c6c0000000000000007
c8=7469657277616c6c0000000000000008
c9=7469657277616c6c0000000000000009
c10=7469657277616c6c000000000000000a
c11=7469657277616c6c000000000000000b
capture ft-add4-tcp-0 filter add dev $dev ingress protocol ip prio 48880 handle 1 flower skip_sw ip_proto tcp src_ip 10.0.0.1 dst_ip 10.0.0.2 src_port 40000 dst_port 443 action drop cookie $c7
capture ft-add4-tcp-1 filter add dev $dev ingress protocol ip prio 48880 handle 2 flower skip_sw ip_proto tcp src_ip 10.0.0.2 dst_ip 10.0.0.1 src_port 443 dst_port 40000 action drop cookie $c7
capture ft-add4-udp-0 filter add dev $dev ingress protocol ip prio 48880 handle 3 flower skip_sw ip_proto udp src_ip 192.0.2.1 dst_ip 192.0.2.53 src_port 5353 dst_port 53 action pass cookie $c8
capture ft-add4-icmp-0 filter add dev $dev ingress protocol ip prio 48880 handle 5 flower skip_sw ip_proto icmp src_ip 10.0.0.1 dst_ip 10.0.0.9 action drop cookie $c9
capture ft-add6-tcp-1 filter add dev $dev ingress protocol ipv6 prio 48881 handle 2 flower skip_sw ip_proto tcp src_ip 2001:db8::2 dst_ip 2001:db8::1 src_port 443 dst_port 40000 action drop cookie $c10
capture ft-add6-udp-0 filter add dev $dev ingress protocol ipv6 prio 48881 handle 3 flower skip_sw ip_proto udp src_ip 2001:db8::1 dst_ip 2001:db8::35 src_port 5353 dst_port 53 action pass cookie $c11
capture ft-del4 filter del dev $dev ingress protocol ip prio 48880 handle 1 flower
capture ft-del6 filter del dev $dev ingress protocol ipv6 prio 48881 handle 2 flower
capture ft-dump4 -s filter show dev $dev ingress protocol ip prio 48880
capture ft-dump6 -s filter show dev $dev ingress protocol ipv6 prio 48881

tc filter add dev twg0 ingress protocol ipv6 prio 48878 handle 10 flower skip_sw ip_proto udp src_ip 2001:db8::1 dst_ip 2001:db8::2 src_port 5353 dst_port 53 action pass cookie 7469657277616c6c

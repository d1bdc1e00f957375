tc filter add dev twfg0 ingress protocol ip prio 48880 handle 5 flower skip_sw ip_proto icmp src_ip 10.0.0.1 dst_ip 10.0.0.9 action drop cookie 7469657277616c6c0000000000000009

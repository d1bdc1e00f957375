tc filter add dev twg0 ingress protocol ip prio 48879 handle 9 flower skip_sw ip_proto tcp src_ip 10.0.0.1 dst_ip 10.0.0.2 src_port 40000 dst_port 443 action pass cookie 7469657277616c6c

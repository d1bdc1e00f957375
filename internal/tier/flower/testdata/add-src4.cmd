tc filter add dev twg0 ingress protocol ip prio 48879 handle 7 flower skip_sw src_ip 192.0.2.7 action drop cookie 7469657277616c6c

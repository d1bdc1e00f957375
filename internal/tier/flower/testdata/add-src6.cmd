tc filter add dev twg0 ingress protocol ipv6 prio 48878 handle 8 flower skip_sw src_ip 2001:db8::7 action drop cookie 7469657277616c6c

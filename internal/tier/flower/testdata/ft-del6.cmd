tc filter del dev twfg0 ingress protocol ipv6 prio 48881 handle 2 flower

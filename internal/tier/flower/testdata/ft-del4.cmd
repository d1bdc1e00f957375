tc filter del dev twfg0 ingress protocol ip prio 48880 handle 1 flower

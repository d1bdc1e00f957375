tc filter del dev twg0 ingress protocol ip prio 48879 handle 7 flower

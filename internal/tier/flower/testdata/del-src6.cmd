tc filter del dev twg0 ingress protocol ipv6 prio 48878 handle 8 flower

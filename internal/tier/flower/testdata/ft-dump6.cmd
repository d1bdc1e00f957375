tc -s filter show dev twfg0 ingress protocol ipv6 prio 48881

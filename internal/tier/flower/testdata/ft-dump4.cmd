tc -s filter show dev twfg0 ingress protocol ip prio 48880

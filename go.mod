module github.com/tierwall/tierwall

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/mdlayher/netlink v1.7.2
	github.com/spf13/cobra v1.10.2
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.49.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/socket v0.5.1 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go

package bpffs

import "testing"

// The same pinned directory reached through /sys/fs/bpf (the daemon) and
// through /run/tierwall/bpffs (a CLI under `ip netns exec`) takes one lock;
// different directories take different ones.
func TestLockNameIgnoresTheMount(t *testing.T) {
	a := lockName(DefaultBPFFS + "/tierwall/ns:lab/eth0")
	b := lockName(runBPFFS + "/tierwall/ns:lab/eth0")
	if a != b {
		t.Fatalf("one directory, two locks: %q vs %q", a, b)
	}
	if c := lockName(DefaultBPFFS + "/tierwall/ns:lab/eth1"); c == a {
		t.Fatalf("two directories share lock %q", c)
	}
	if c := lockName(DefaultBPFFS + "/tierwall-nic/ns:lab/eth0"); c == a {
		t.Fatalf("the NIC stage and the filter share lock %q", c)
	}
}

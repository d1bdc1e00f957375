package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultBPFFS is where tierwall expects bpffs; PinRoot lives under it.
const DefaultBPFFS = "/sys/fs/bpf"

// lockDir holds one lock file per pinned directory. /run survives
// `ip netns exec` (which only replaces /sys), so CLI and daemon in any
// mount namespace of the host contend on the same file.
const lockDir = "/run/tierwall"

// runBPFFS is a bind mount of the host's bpffs that tierwall keeps under
// /run. `ip netns exec` replaces /sys with a fresh sysfs (no bpffs) but
// keeps /run, so through this path a CLI run that way sees the same pins
// as one run with --netns or from the host.
const runBPFFS = lockDir + "/bpffs"

// bpffsRoot returns a bpffs mount that outlives this process, mounting
// bpffs on /sys/fs/bpf when there is none. A bpffs mounted inside the
// private mount namespace of `ip netns exec` would vanish with it, taking
// the pinned link, and so the filter, along: runBPFFS avoids that whenever
// tierwall has run in the host's mount namespace before.
func bpffsRoot() (string, error) {
	if isBPFFS(DefaultBPFFS) {
		exposeOnRun()
		return DefaultBPFFS, nil
	}
	if isBPFFS(runBPFFS) {
		return runBPFFS, nil
	}
	if err := os.MkdirAll(DefaultBPFFS, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", DefaultBPFFS, err)
	}
	if err := unix.Mount("bpf", DefaultBPFFS, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mounting bpffs on %s: %w", DefaultBPFFS, err)
	}
	exposeOnRun()
	return DefaultBPFFS, nil
}

// exposeOnRun bind-mounts /sys/fs/bpf on runBPFFS; best effort, since only
// `ip netns exec` users need it.
func exposeOnRun() {
	if isBPFFS(runBPFFS) {
		return
	}
	if err := os.MkdirAll(runBPFFS, 0o700); err == nil {
		_ = unix.Mount(DefaultBPFFS, runBPFFS, "", unix.MS_BIND, "")
	}
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.BPF_FS_MAGIC
}

// netnsTag names the network namespace this process is in, for pin paths:
// "" for the host's, "ns:NAME" for one under /run/netns, "ns:INODE"
// otherwise. ':' cannot appear in an interface name, so the tag never
// collides with one.
func netnsTag() string {
	self, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return ""
	}
	if init, err := os.Stat("/proc/1/ns/net"); err == nil && os.SameFile(self, init) {
		return ""
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if st, err := os.Stat(filepath.Join("/run/netns", e.Name())); err == nil && os.SameFile(self, st) {
				return "ns:" + e.Name()
			}
		}
	}
	return fmt.Sprintf("ns:%d", self.Sys().(*syscall.Stat_t).Ino)
}

// pinDir is /sys/fs/bpf/tierwall/<ifname> in the host's network namespace
// and /sys/fs/bpf/tierwall/ns:<name>/<ifname> in any other.
func pinDir(root, ifname string) string {
	if tag := netnsTag(); tag != "" {
		return filepath.Join(root, "tierwall", pinName(tag), pinName(ifname))
	}
	return filepath.Join(root, "tierwall", pinName(ifname))
}

// pinName escapes a name for bpffs, which refuses '.' in names (VLAN
// interfaces such as eth0.100 have one). ':' stands in for it: interface
// names cannot contain ':', so the mapping cannot collide.
func pinName(s string) string { return strings.ReplaceAll(s, ".", ":") }

// ifaceFromPin undoes pinName.
func ifaceFromPin(s string) string { return strings.ReplaceAll(s, ":", ".") }

// fileLock is an exclusive flock held while state is changed.
type fileLock struct{ f *os.File }

func lockFor(dir string) (*fileLock, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", lockDir, err)
	}
	name := strings.NewReplacer("/", "_", ":", "_").Replace(strings.TrimPrefix(dir, "/"))
	f, err := os.OpenFile(filepath.Join(lockDir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return &fileLock{f}, nil
}

func (l *fileLock) unlock() {
	if l != nil && l.f != nil {
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

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

// bpffsRoot returns a bpffs mount that outlives this process. Under
// `ip netns exec` /sys is a fresh sysfs without bpffs; a bpffs mounted
// there would vanish with the mount namespace and take the pinned link,
// and so the filter, with it. The host's mount is reached through PID 1's
// root instead, and only when there is none is a new one mounted.
func bpffsRoot() (string, error) {
	if isBPFFS(DefaultBPFFS) {
		return DefaultBPFFS, nil
	}
	if !sameMountNS() {
		host := "/proc/1/root" + DefaultBPFFS
		if isBPFFS(host) {
			return host, nil
		}
	}
	if err := os.MkdirAll(DefaultBPFFS, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", DefaultBPFFS, err)
	}
	if err := unix.Mount("bpf", DefaultBPFFS, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mounting bpffs on %s: %w", DefaultBPFFS, err)
	}
	return DefaultBPFFS, nil
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.BPF_FS_MAGIC
}

func sameMountNS() bool {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	init, err2 := os.Readlink("/proc/1/ns/mnt")
	return err1 != nil || err2 != nil || self == init
}

// netnsTag names the network namespace this process is in, for pin paths:
// "" for the host's, "ns:NAME" for one under /run/netns, "ns:INODE"
// otherwise. ':' cannot appear in an interface name, so the tag never
// collides with one.
func netnsTag() string {
	self, err := os.Stat("/proc/self/ns/net")
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
		return filepath.Join(root, "tierwall", tag, ifname)
	}
	return filepath.Join(root, "tierwall", ifname)
}

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

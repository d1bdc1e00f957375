// SPDX-License-Identifier: Apache-2.0

// Package bpffs is the pin layout shared by tierwall's BPF stages: where
// bpffs is mounted (and how it stays reachable from `ip netns exec`), the
// directory of each stage per network namespace and interface, the lock
// that serialises writers of one directory, and the atomic swap of a
// pinned XDP link. The filter (package datapath) and the emulated NIC stage
// (package nicstage) both pin through it, so their trees can never collide.
package bpffs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
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

// Root returns a bpffs mount that outlives this process, mounting
// bpffs on /sys/fs/bpf when there is none. A bpffs mounted inside the
// private mount namespace of `ip netns exec` would vanish with it, taking
// the pinned link, and so the filter, along: runBPFFS avoids that whenever
// tierwall has run in the host's mount namespace before.
func Root() (string, error) {
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

// NetnsTag names the network namespace this process is in, for pin paths:
// "" for the host's, "ns:NAME" for one under /run/netns, "ns:INODE"
// otherwise. ':' cannot appear in an interface name, so the tag never
// collides with one.
func NetnsTag() string {
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

// FilterDir is /sys/fs/bpf/tierwall/<ifname> in the host's network namespace
// and /sys/fs/bpf/tierwall/ns:<name>/<ifname> in any other.
func FilterDir(root, ifname string) string {
	if tag := NetnsTag(); tag != "" {
		return filepath.Join(root, "tierwall", PinName(tag), PinName(ifname))
	}
	return filepath.Join(root, "tierwall", PinName(ifname))
}

// PinName escapes a name for bpffs, which refuses '.' in names (VLAN
// interfaces such as eth0.100 have one). ':' stands in for it: interface
// names cannot contain ':', so the mapping cannot collide.
func PinName(s string) string { return strings.ReplaceAll(s, ".", ":") }

// IfaceFromPin undoes PinName.
func IfaceFromPin(s string) string { return strings.ReplaceAll(s, ":", ".") }

// FileLock is an exclusive flock held while state is changed.
type FileLock struct{ f *os.File }

// ErrBusy is a lock another process holds (TryLockFile only).
var ErrBusy = errors.New("lock held by another process")

// RunDir holds the lock files and the records kept next to them.
const RunDir = lockDir

// Lock takes the exclusive lock of a pinned directory; Unlock releases it.
func Lock(dir string) (*FileLock, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", lockDir, err)
	}
	return lockFile(filepath.Join(lockDir, lockName(dir)+".lock"), unix.LOCK_EX)
}

// TryLockFile takes the exclusive lock on path without waiting: ErrBusy
// when another process holds it.
func TryLockFile(path string) (*FileLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	return lockFile(path, unix.LOCK_EX|unix.LOCK_NB)
}

// lockFile flocks path, created if missing. A lock file may be removed
// (Remove) by its holder: whoever opened it before that and locks it after
// holds a lock on a file nobody else can reach, so the lock is taken again
// on the file the path names now.
func lockFile(path string, how int) (*FileLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), how); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("locking %s: %w", path, ErrBusy)
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return &FileLock{f}, nil
		}
		f.Close()
	}
}

// Describe writes s into the lock file, replacing what was there: who
// holds it, for whoever waits on it to say.
func (l *FileLock) Describe(s string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(s), 0)
	return err
}

func (l *FileLock) Unlock() {
	if l != nil && l.f != nil {
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// Remove deletes the lock file and releases the lock: for state that is
// gone for good (a detached interface, a daemon that exited), so lock
// files do not pile up under /run. Safe against a process waiting on it:
// see lockFile.
func (l *FileLock) Remove() {
	if l != nil && l.f != nil {
		_ = os.Remove(l.f.Name())
		l.Unlock()
	}
}

// Key names the pinned directory dir in the run directory, as its lock
// does: the same whichever mount of the pin tree dir was reached through.
func Key(dir string) string { return lockName(dir) }

// Forget removes what a detached filter leaves behind: the lock file of
// its directory and the namespace's directory in the pin tree once empty.
// It does nothing while dir exists (attached again meanwhile).
func Forget(dir string) error {
	lk, err := Lock(dir)
	if err != nil {
		return err
	}
	if Exists(dir) {
		lk.Unlock()
		return nil
	}
	// Only a namespace's directory ("ns:NAME"): the tree's own directory
	// is where every attach starts from.
	if parent := filepath.Dir(dir); strings.HasPrefix(filepath.Base(parent), "ns:") {
		if err := os.Remove(parent); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			lk.Unlock()
			return fmt.Errorf("removing %s: %w", parent, err)
		}
	}
	lk.Remove()
	return nil
}

// Exists reports whether path exists (an unreadable path counts as existing).
func Exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// NICDir keeps NIC stages apart from filters: a separate tree, so no
// interface name can make the two collide.
func NICDir(root, ifname string) string {
	d := FilterDir(root, ifname)
	rel, _ := filepath.Rel(filepath.Join(root, "tierwall"), d)
	return filepath.Join(root, "tierwall-nic", rel)
}

// RemoveNetns removes the pinned state of every filter and NIC stage that
// ran in the network namespace named ns (a name under /run/netns): what
// deleting the namespace leaves behind, held by the pins for as long as the
// machine runs, and found again by the next namespace of that name.
func RemoveNetns(root, ns string) error {
	// A namespace name is one path element (ip netns refuses '/'); any
	// other would name a directory elsewhere in the pin tree.
	if ns == "" || strings.Contains(ns, "/") {
		return fmt.Errorf("network namespace name %q: want one path element", ns)
	}
	tag := PinName("ns:" + ns)
	return errors.Join(os.RemoveAll(filepath.Join(root, "tierwall", tag)), os.RemoveAll(filepath.Join(root, "tierwall-nic", tag)))
}

// NICDirFor maps a filter's pin directory to the NIC stage's on the same
// interface (same namespace tag and escaped name, the other tree).
func NICDirFor(filterDir string) string {
	root := filepath.Dir(filterDir)
	var parts []string
	for filepath.Base(root) != "tierwall" && root != "/" {
		parts = append([]string{filepath.Base(root)}, parts...)
		root = filepath.Dir(root)
	}
	return filepath.Join(append([]string{filepath.Dir(root), "tierwall-nic"}, append(parts, filepath.Base(filterDir))...)...)
}

// UpdatePinnedLink swaps prog into the XDP link pinned at lp, atomically:
// the old program runs until the new one takes over, so no packet goes
// unfiltered during an upgrade. A link whose interface went away and came
// back is defunct: it is unpinned and reported, for the caller to attach
// anew. No pinned link at all is neither updated nor defunct.
func UpdatePinnedLink(lp string, prog *ebpf.Program, ifindex int) (updated, defunct bool, err error) {
	old, err := link.LoadPinnedLink(lp, nil)
	if err != nil {
		return false, false, nil
	}
	defer old.Close()
	info, ierr := old.Info()
	if ierr == nil && info.XDP() != nil && int(info.XDP().Ifindex) == ifindex {
		if err := old.Update(prog); err != nil {
			return false, false, fmt.Errorf("replacing program on pinned link: %w", err)
		}
		return true, false, nil
	}
	// A pin left behind would make the caller's new link fail to pin,
	// with an error that hides this one.
	if err := old.Unpin(); err != nil {
		return false, false, fmt.Errorf("unpinning defunct link: %w", err)
	}
	return false, true, nil
}

// LinkPin is the name of the pinned XDP link in a stage's directory.
const LinkPin = "link"

// lockName names the lock of a pinned directory by its place in the pin
// tree, not by the bpffs mount it was reached through: a CLI under `ip
// netns exec` sees the tree at runBPFFS, the daemon at DefaultBPFFS, and
// both must take the same lock.
func lockName(dir string) string {
	for _, root := range []string{runBPFFS, DefaultBPFFS} {
		if rel, ok := strings.CutPrefix(dir, root+"/"); ok {
			dir = "bpffs/" + rel
			break
		}
	}
	return strings.NewReplacer("/", "_", ":", "_").Replace(strings.TrimPrefix(dir, "/"))
}

// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
)

// One daemon per data plane. A daemon takes its data plane's owner lock
// before it touches anything (program, maps, state file, socket) and holds
// it until it exits; next to the lock it publishes an owner record that
// tells the CLI which process owns the data plane and where its API
// listens, so the CLI changes rules through the daemon instead of behind
// its back. Both live in the host's run directory (/run/tierwall), named
// after the pin directory: bpffs holds no regular files, and /run is the
// one place that CLI runs from `ip netns exec` and --netns both see.

// Owner is the record of the daemon that owns a data plane.
type Owner struct {
	PID int `json:"pid"`
	// Start is the process's start time (clock ticks since boot, from
	// /proc/PID/stat): a pid reused by another process is not the owner.
	Start     uint64    `json:"start"`
	Interface string    `json:"interface"`
	Socket    string    `json:"socket"` // API unix socket; "" when the daemon serves none
	TCP       string    `json:"tcp"`    // API TCP address (needs the token)
	Config    string    `json:"config"`
	StateFile string    `json:"state_file"`
	Since     time.Time `json:"since"`
}

// ErrOwned is a data plane another daemon owns.
var ErrOwned = errors.New("data plane owned by another daemon")

// Ownership is a held owner lock and its published record.
type Ownership struct {
	lock   *bpffs.FileLock
	record string
}

// ownerPaths are the lock and the record of the data plane keyed key in
// runDir.
func ownerPaths(runDir, key string) (lock, record string) {
	base := filepath.Join(runDir, key)
	return base + ".owner.lock", base + ".owner"
}

// Own takes the owner lock of a data plane without waiting and publishes
// o (pid and start time filled in) as its record. A data plane owned by a
// live daemon is ErrOwned, naming it.
func Own(runDir, key string, o Owner) (*Ownership, error) {
	lp, rp := ownerPaths(runDir, key)
	lk, err := bpffs.TryLockFile(lp)
	if errors.Is(err, bpffs.ErrBusy) {
		if cur, ok := readOwner(rp); ok {
			where := "no API socket"
			if cur.Socket != "" {
				where = "API on " + cur.Socket
			}
			return nil, fmt.Errorf("%w: pid %d (%s, since %s) owns the data plane on %s; stop it first",
				ErrOwned, cur.PID, where, cur.Since.Format(time.RFC3339), cur.Interface)
		}
		return nil, fmt.Errorf("%w: another process holds %s (starting?)", ErrOwned, lp)
	}
	if err != nil {
		return nil, fmt.Errorf("taking the owner lock: %w", err)
	}
	// Two data planes, one socket or state file: the second daemon would
	// rewrite the first one's state, or fail on the socket only after
	// attaching. Refused here, before either.
	if other, what, ok := sharing(runDir, key, o); ok {
		lk.Unlock()
		return nil, fmt.Errorf("%w: pid %d (data plane on %s) already uses %s", ErrOwned, other.PID, other.Interface, what)
	}
	o.PID = os.Getpid()
	if o.Config != "" {
		if abs, err := filepath.Abs(o.Config); err == nil {
			o.Config = abs
		}
	}
	o.Start = procStart(o.PID)
	if o.Since.IsZero() {
		o.Since = time.Now()
	}
	if err := writeOwner(rp, o); err != nil {
		lk.Remove()
		return nil, err
	}
	return &Ownership{lock: lk, record: rp}, nil
}

// Release removes the record and the lock: the data plane has no owner.
func (w *Ownership) Release() {
	if w == nil || w.lock == nil {
		return
	}
	_ = os.Remove(w.record)
	w.lock.Remove()
	w.lock = nil
}

// sharing finds a live daemon of another data plane that uses o's API
// socket or state file.
func sharing(runDir, key string, o Owner) (Owner, string, bool) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return Owner{}, "", false
	}
	_, mine := ownerPaths(runDir, key)
	for _, e := range ents {
		p := filepath.Join(runDir, e.Name())
		if !strings.HasSuffix(e.Name(), ".owner") || p == mine {
			continue
		}
		other, live := readOwner(p)
		switch {
		case !live:
		case o.Socket != "" && other.Socket == o.Socket:
			return other, "the API socket " + o.Socket, true
		case o.StateFile != "" && other.StateFile == o.StateFile:
			return other, "the state file " + o.StateFile, true
		}
	}
	return Owner{}, "", false
}

// OwnerOf returns the live owner of a data plane; false when there is none
// (no record, or a stale one: its process is gone).
func OwnerOf(runDir, key string) (Owner, bool) {
	_, rp := ownerPaths(runDir, key)
	return readOwner(rp)
}

// readOwner reads a record and checks that its process still runs.
func readOwner(path string) (Owner, bool) {
	var o Owner
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &o) != nil || o.PID <= 0 {
		return o, false
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", o.PID)); err != nil {
		return o, false
	}
	if o.Start != 0 && procStart(o.PID) != o.Start {
		return o, false // the pid was reused
	}
	return o, true
}

// writeOwner publishes o atomically: readers see the old record or the
// new one, never half of one.
func writeOwner(path string, o Owner) error {
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding owner record: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing owner record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("publishing owner record: %w", err)
	}
	return nil
}

// procStart is field 22 of /proc/PID/stat, 0 when unknown.
func procStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// OwnerKey names the data plane of iface in the current network namespace
// under pinRoot ("" for the default bpffs), as the CLI and the daemon both
// compute it.
func OwnerKey(pinRoot, iface string) string {
	if pinRoot == "" {
		pinRoot = bpffs.DefaultBPFFS
	}
	return bpffs.Key(bpffs.FilterDir(pinRoot, iface))
}

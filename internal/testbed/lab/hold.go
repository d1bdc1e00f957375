// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
)

// LockFile serialises everything that uses the machine's testbed: the
// two labs, the evaluation's veth pair, the benchmarks and the demo. Two
// of them at once share the namespaces' names and the two CPUs: one tears
// down what the other measures on, or both measure each other (a CI run
// started during `make eval` failed on the evaluation's pinned tables).
// An flock, so a crashed holder releases it with its last descriptor.
const LockFile = "/run/tierwall-testbed.lock"

// lockPath is LockFile; tests point it elsewhere.
var lockPath = LockFile

var hold struct {
	sync.Mutex
	n int             // holds in this process (Hold is reentrant)
	l *bpffs.FileLock // the lock while n > 0
}

// Hold takes the testbed for this process, waiting while another process
// holds it (saying so once on log, with who holds it) until ctx ends.
// Reentrant: a process's nested holds share one lock. what says what
// this process does with the testbed, for whoever waits on it. Calls of
// release after its first do nothing.
func Hold(ctx context.Context, what string, log io.Writer) (release func(), err error) {
	hold.Lock()
	defer hold.Unlock()
	if hold.n == 0 {
		l, err := lockTestbed(ctx, what, log)
		if err != nil {
			return nil, err
		}
		hold.l = l
	}
	hold.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			hold.Lock()
			defer hold.Unlock()
			if hold.n--; hold.n == 0 {
				hold.l.Unlock()
				hold.l = nil
			}
		})
	}, nil
}

func lockTestbed(ctx context.Context, what string, log io.Writer) (*bpffs.FileLock, error) {
	told := false
	for {
		l, err := bpffs.TryLockFile(lockPath)
		if err == nil {
			// A failed write only makes the waiters' message vaguer.
			_ = l.Describe(fmt.Sprintf("pid %d, %s, since %s\n", os.Getpid(), what, time.Now().UTC().Format(time.TimeOnly)))
			return l, nil
		}
		if !errors.Is(err, bpffs.ErrBusy) {
			return nil, fmt.Errorf("testbed lock: %w", err)
		}
		if !told && log != nil {
			b, _ := os.ReadFile(lockPath)
			holder := strings.TrimSpace(string(b))
			if holder == "" {
				holder = "another process"
			}
			fmt.Fprintf(log, "the testbed is in use (%s); waiting for it to finish\n", holder)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the testbed (%s): %w", lockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

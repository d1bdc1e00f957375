package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
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
	n int      // holds in this process (Hold is reentrant)
	f *os.File // the locked file while n > 0
}

// Hold takes the testbed for this process, waiting while another process
// holds it (saying so once on log, with who holds it) until ctx ends.
// Reentrant: a process's nested holds share one lock. what says what
// this process does with the testbed, for whoever waits on it. The
// returned release must be called once.
func Hold(ctx context.Context, what string, log io.Writer) (release func(), err error) {
	hold.Lock()
	defer hold.Unlock()
	if hold.n == 0 {
		f, err := lockTestbed(ctx, what, log)
		if err != nil {
			return nil, err
		}
		hold.f = f
	}
	hold.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			hold.Lock()
			defer hold.Unlock()
			if hold.n--; hold.n == 0 {
				hold.f.Close() // releases the flock
				hold.f = nil
			}
		})
	}, nil
}

func lockTestbed(ctx context.Context, what string, log io.Writer) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testbed lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("testbed lock %s: %w", lockPath, err)
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
			f.Close()
			return nil, fmt.Errorf("waiting for the testbed (%s): %w", lockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Say who holds it; a failed write only makes the waiters' message
	// vaguer.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d, %s, since %s\n", os.Getpid(), what, time.Now().UTC().Format(time.TimeOnly))
	}
	return f, nil
}

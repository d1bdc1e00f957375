// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ownNice holds the threads that set their own nice value (a generator's),
// which Favour leaves alone.
var ownNice sync.Map // tid → struct{}

// KeepNice exempts thread tid from Favour until release: a thread that
// chose its own priority (the flood's generator) keeps it.
func KeepNice(tid int) (release func()) {
	ownNice.Store(tid, struct{}{})
	return func() { ownNice.Delete(tid) }
}

// Favour runs every thread of this process at nice until stop, except
// those under KeepNice. The lab runs its clients here, as goroutines on
// whichever thread Go picks, so the value is the process's: Linux keeps a
// nice value per thread, and Go starts threads as it needs them, each
// inheriting its creator's value, so Favour sets the threads there are
// now and then looks again every 100 ms for new ones. stop puts back
// nice 0.
func Favour(nice int) (stop func(), err error) {
	if err := setAll(nice); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = setAll(nice)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		_ = setAll(0)
	}, nil
}

// setAll sets nice on every thread of this process not under KeepNice.
func setAll(nice int) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("this process's threads: %w", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, own := ownNice.Load(tid); own {
			continue
		}
		// ESRCH: the thread ended since it was listed.
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("nice %d for thread %d: %w", nice, tid, err)
		}
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"runtime"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testutil"
	"golang.org/x/sys/unix"
)

// niceOf is thread tid's nice value (getpriority's kernel form is 20-nice).
func niceOf(t *testing.T, tid int) int {
	t.Helper()
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		t.Fatalf("getpriority %d: %v", tid, err)
	}
	return 20 - p
}

// TestFavourKeepNice: Favour raises the process's threads, one started
// after it among them, and leaves a thread under KeepNice at its own value;
// stop puts back 0.
func TestFavourKeepNice(t *testing.T) {
	testutil.RequireRoot(t) // a negative nice needs CAP_SYS_NICE
	own := make(chan int)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		tid := unix.Gettid()
		defer KeepNice(tid)()
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 5); err != nil {
			t.Errorf("setpriority: %v", err)
		}
		own <- tid
		<-release
	}()
	ownTid := <-own
	stop, err := Favour(-7)
	if err != nil {
		t.Fatal(err)
	}
	// A thread Go starts now inherits its creator's value: the next
	// sweep (every 100 ms) must reach it too.
	late := make(chan int)
	go func() {
		runtime.LockOSThread()
		late <- unix.Gettid()
		<-release
	}()
	lateTid := <-late
	_ = unix.Setpriority(unix.PRIO_PROCESS, lateTid, 0)
	time.Sleep(300 * time.Millisecond)
	if got := niceOf(t, unix.Gettid()); got != -7 {
		t.Errorf("this thread: nice %d, want -7", got)
	}
	if got := niceOf(t, lateTid); got != -7 {
		t.Errorf("a thread set to 0 after Favour: nice %d, want -7", got)
	}
	if got := niceOf(t, ownTid); got != 5 {
		t.Errorf("the thread under KeepNice: nice %d, want its own 5", got)
	}
	stop()
	if got := niceOf(t, unix.Gettid()); got != 0 {
		t.Errorf("after stop: nice %d, want 0", got)
	}
	close(release)
}

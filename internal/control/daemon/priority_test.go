// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSetNiceAllThreads(t *testing.T) {
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	was := 20 - cur
	if os.Geteuid() != 0 {
		t.Skip("not root: a test cannot give back the niceness it raises")
	}
	t.Cleanup(func() { _ = setNice(was, quietLog()) })
	want := min(was+3, 19)
	if err := setNice(want, quietLog()); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // exited
		}
		if 20-p != want {
			t.Errorf("thread %d at nice %d, want %d", tid, 20-p, want)
		}
	}
}

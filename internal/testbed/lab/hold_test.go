// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain runs this package's tests, or, when TW_HOLD_HELPER names a
// lock file, the other process of TestHoldExcludesOtherProcesses: it
// holds the testbed until its stdin closes.
func TestMain(m *testing.M) {
	path := os.Getenv("TW_HOLD_HELPER")
	if path == "" {
		os.Exit(m.Run())
	}
	lockPath = path
	release, err := Hold(context.Background(), "the helper", nil)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF: the test let go
	release()
	os.Exit(0)
}

func TestHoldExcludesOtherProcesses(t *testing.T) {
	lockPath = filepath.Join(t.TempDir(), "lock")
	t.Cleanup(func() { lockPath = LockFile })

	// In this process holds nest: the inner one neither waits nor
	// releases the outer's lock.
	outer, err := Hold(context.Background(), "outer", nil)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := Hold(context.Background(), "inner", nil)
	if err != nil {
		t.Fatal(err)
	}
	inner()
	inner() // a second call of the same release is a no-op
	if hold.n != 1 || hold.l == nil {
		t.Fatalf("after the inner release: %d holds, lock %v", hold.n, hold.l)
	}
	outer()
	if hold.n != 0 || hold.l != nil {
		t.Fatalf("after the outer release: %d holds, lock %v", hold.n, hold.l)
	}

	// Another process holds it: Hold waits, says who holds it, and
	// gives up when its context ends.
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), "TW_HOLD_HELPER="+lockPath)
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); helper.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := Hold(ctx, "the test", &log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Hold while another process holds the testbed: %v", err)
	}
	if want := fmt.Sprintf("pid %d, the helper", helper.Process.Pid); !strings.Contains(log.String(), want) {
		t.Errorf("the waiting message %q does not name the holder (%s)", log.String(), want)
	}
	if hold.n != 0 {
		t.Fatalf("a failed Hold counts as held: %d", hold.n)
	}

	// Once the other process lets go, Hold takes it.
	stdin.Close()
	if err := helper.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	release, err := Hold(context.Background(), "the test", nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
}

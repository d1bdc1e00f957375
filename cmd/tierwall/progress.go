// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A change of 199K rules through the daemon printed nothing for five
// minutes: an operator could not tell a slow daemon from a hung one. One
// that takes more than a second says what it is doing, on stderr and only
// when stderr is a terminal, so scripts and pipes see the same output as
// before.

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressAfter is how long a change runs before it says so.
var progressAfter = time.Second

// startProgress prints what (and how long it has taken) on stderr every
// half second once progressAfter has passed, when stderr is a terminal;
// the function it returns stops it and clears the line, before the
// command prints its result (called again, it does nothing).
func startProgress(what string) func() {
	if !isTerminal(os.Stderr) {
		return func() {}
	}
	return progressTo(os.Stderr, what)
}

// progressTo is startProgress writing to w whatever w is (tests).
func progressTo(w io.Writer, what string) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTimer(progressAfter)
		defer t.Stop()
		shown := false
		for {
			select {
			case <-stop:
				if shown {
					fmt.Fprintf(w, "\r\033[K")
				}
				return
			case <-t.C:
				shown = true
				fmt.Fprintf(w, "\r\033[Ktierwall: %s… %s", what, time.Since(start).Round(100*time.Millisecond))
				t.Reset(500 * time.Millisecond)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(stop) })
		<-done
	}
}

// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

// List names every prefix in a set of files (threat feeds: one address or
// prefix per line, '#' comments), reloading a file when its modification
// time or size changes. A file that fails to load keeps its last good
// contents and the error is reported by Err.
//
// A changed file is read only once it has settled: the same size and
// modification time at two reloads in a row (one control-loop interval).
// A feed truncated and rewritten in place is otherwise read half-written,
// and every ban missing from the half would be lifted at once.
type List struct {
	Paths []string

	files   map[string]listFile
	pending map[string]listFile // changed since applied, not yet settled
	err     error
}

type listFile struct {
	mtime    time.Time
	size     int64
	prefixes []netip.Prefix
}

func (l *List) Name() string { return "list" }

// Err is the last reload problem, or nil.
func (l *List) Err() error { return l.err }

// Reload re-reads files that changed; Detect calls it.
func (l *List) Reload() error {
	if l.files == nil {
		l.files = map[string]listFile{}
	}
	var firstErr error
	for _, p := range l.Paths {
		st, err := os.Stat(p)
		if err != nil {
			firstErr = firstErrOf(firstErr, fmt.Errorf("list %s: %w", p, err))
			continue
		}
		old, ok := l.files[p]
		if ok && old.mtime.Equal(st.ModTime()) && old.size == st.Size() {
			delete(l.pending, p)
			continue
		}
		if ok { // a change to a file in use: wait until it settles
			seen, was := l.pending[p]
			if !was || !seen.mtime.Equal(st.ModTime()) || seen.size != st.Size() {
				if l.pending == nil {
					l.pending = map[string]listFile{}
				}
				l.pending[p] = listFile{mtime: st.ModTime(), size: st.Size()}
				continue
			}
			delete(l.pending, p)
		}
		f, err := os.Open(p)
		if err != nil {
			firstErr = firstErrOf(firstErr, fmt.Errorf("list %s: %w", p, err))
			continue
		}
		ps, err := rule.ReadList(f, p)
		f.Close()
		if err != nil {
			firstErr = firstErrOf(firstErr, err) // keep the last good contents
			continue
		}
		l.files[p] = listFile{mtime: st.ModTime(), size: st.Size(), prefixes: ps}
	}
	l.err = firstErr
	return firstErr
}

func firstErrOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (l *List) Detect(*Traffic) []Detection {
	_ = l.Reload() // kept in l.err for Err; files that fail keep their last good contents
	seen := map[netip.Prefix]bool{}
	var out []Detection
	for _, p := range l.Paths {
		for _, pf := range l.files[p].prefixes {
			if seen[pf] {
				continue
			}
			seen[pf] = true
			out = append(out, Detection{Prefix: pf, Detector: l.Name(), Reason: "listed in " + p})
		}
	}
	return out
}

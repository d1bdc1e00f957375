// SPDX-License-Identifier: Apache-2.0

package alert

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// ErrNoAttack means the log holds no attack with that ID.
var ErrNoAttack = errors.New("no such attack")

// Log is the attacks' record: one JSON report per line in
// <dir>/attacks.jsonl, each report of an attack superseding the one
// before, and each attack's sampled packets in <dir>/attacks/<id>.pcap.
// Past MaxBytes the file becomes attacks.jsonl.1 (the previous .1 goes,
// with the pcaps of attacks no longer in either file), so the log takes
// at most about twice MaxBytes plus the pcaps of the attacks it lists.
// Its methods are safe for concurrent use: the API reads while the
// daemon's loop writes.
type Log struct {
	dir      string
	maxBytes int64
	mu       sync.Mutex
}

// DefaultLogBytes is the rotation size when none is given.
const DefaultLogBytes = 4 << 20

// OpenLog opens (creating) the attack log in dir.
func OpenLog(dir string, maxBytes int64) (*Log, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultLogBytes
	}
	if err := os.MkdirAll(filepath.Join(dir, "attacks"), 0o750); err != nil {
		return nil, fmt.Errorf("creating the attack log: %w", err)
	}
	return &Log{dir: dir, maxBytes: maxBytes}, nil
}

func (l *Log) path() string { return filepath.Join(l.dir, "attacks.jsonl") }

// validID is what Tracker makes; anything else could name a file outside
// the log's directory.
var validID = regexp.MustCompile(`^[0-9A-Za-z.-]{1,64}$`)

// PcapPath is where the pcap of attack id lives (whether or not it exists).
func (l *Log) PcapPath(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("%w: %q is not an attack ID", ErrNoAttack, id)
	}
	return filepath.Join(l.dir, "attacks", id+".pcap"), nil
}

// Append records r as its attack's latest report.
func (l *Log) Append(r Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding attack %s: %w", r.ID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("opening the attack log: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	st, serr := f.Stat()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the attack log: %w", err)
	}
	if serr == nil && st.Size() > l.maxBytes {
		return l.rotate()
	}
	return nil
}

// rotate moves the log aside and drops the pcaps of attacks neither file
// still lists. Callers hold mu.
func (l *Log) rotate() error {
	if err := os.Rename(l.path(), l.path()+".1"); err != nil {
		return fmt.Errorf("rotating the attack log: %w", err)
	}
	rs, err := l.read()
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, r := range rs {
		keep[r.ID+".pcap"] = true
	}
	ents, err := os.ReadDir(filepath.Join(l.dir, "attacks"))
	if err != nil {
		return fmt.Errorf("listing pcaps: %w", err)
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			_ = os.Remove(filepath.Join(l.dir, "attacks", e.Name())) // gone already is as good
		}
	}
	return nil
}

// List returns every attack the log holds, its latest report each,
// oldest first.
func (l *Log) List() ([]Report, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.read()
}

// Get returns attack id's latest report.
func (l *Log) Get(id string) (Report, error) {
	rs, err := l.List()
	if err != nil {
		return Report{}, err
	}
	for _, r := range rs {
		if r.ID == id {
			return r, nil
		}
	}
	return Report{}, fmt.Errorf("%w: %s", ErrNoAttack, id)
}

func (l *Log) read() ([]Report, error) {
	last := map[string]Report{}
	for _, p := range []string{l.path() + ".1", l.path()} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the attack log: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var r Report
			// A line cut by a crash mid-write is skipped, not fatal: the
			// attack's next report supersedes it.
			if json.Unmarshal([]byte(line), &r) == nil && r.ID != "" {
				last[r.ID] = r
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the attack log: %w", err)
		}
	}
	out := make([]Report, 0, len(last))
	for _, r := range last {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// WritePackets replaces attack id's pcap with pkts and returns its path.
func (l *Log) WritePackets(id string, pkts []Packet) (string, error) {
	p, err := l.PcapPath(id)
	if err != nil {
		return "", err
	}
	return p, writePcapFile(p, pkts)
}

// SPDX-License-Identifier: Apache-2.0

package ban

// The state on disk is a snapshot plus a journal. Rewriting every ban on
// every change cost O(bans) per change (a 500K-ban file is ~150 MB of
// JSON, rewritten and fsynced each time an interval added one ban); the
// journal makes a change cost O(change):
//
//   - PATH is the snapshot: the whole state as JSON (the format of the
//     state files of earlier versions, which load as snapshots), written
//     atomically (temporary file, fsync, rename, fsync of the directory).
//   - PATH.journal is a list of changes since that snapshot, one record a
//     line: an 8-hex-digit CRC-32C of the JSON, a space, the JSON. Its
//     first record names the snapshot generation it applies to. Save
//     appends the changed bans and fsyncs.
//   - When the journal outgrows the snapshot (and 1 MiB), Save compacts:
//     a new snapshot of the next generation, then a fresh journal. A
//     crash between the two leaves a journal of the previous generation,
//     which Load ignores: the new snapshot already holds all of it.
//
// A crash mid-append leaves a torn last record: Load keeps every record
// before the first one that does not check (no newline, bad CRC, bad
// JSON), and says so in Warnings.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

type stateFile struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	// Generation pairs the snapshot with its journal (absent in version 1).
	Generation uint64             `json:"generation,omitempty"`
	Bans       []Ban              `json:"bans"`
	Baselines  map[string]float64 `json:"baselines,omitempty"`
}

// stateVersion 2 added the journal; version 1 files load as snapshots
// without one. An older tierwall refuses version 2 rather than silently
// ignoring the journal's changes.
const stateVersion = 2

// record is one journal line: exactly one of its fields is set.
type record struct {
	Gen       *uint64             `json:"gen,omitempty"`
	Put       *Ban                `json:"put,omitempty"`
	Del       *netip.Prefix       `json:"del,omitempty"`
	Baselines *map[string]float64 `json:"baselines,omitempty"`
}

// compactAt is the least journal size that triggers a compaction: below
// it a snapshot would cost more than the replay it saves.
const compactAt = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journal is the open journal of the state at path.
type journal struct {
	path     string
	f        *os.File
	size     int64 // bytes in the journal
	snapSize int64 // bytes in the snapshot it follows
	gen      uint64
	written  int64              // bytes written by Save since the store opened it, for tests and benchmarks
	flushed  time.Time          // last time touched bans were written
	base     map[string]float64 // baselines as last written
}

func journalPath(path string) string { return path + ".journal" }

// Written is the number of bytes Save wrote to the state files so far:
// what one change costs on disk.
func (s *Store) Written() int64 {
	if s.j == nil {
		return 0
	}
	return s.j.written
}

// Save writes what changed since the last Save to the journal and fsyncs
// it: bans added, replaced, removed or moved between tiers, changed
// baselines, bans whose peak grew by more than a quarter (raisePeak),
// and, at most every RefreshEvery, bans whose rate, peak, expiry or quiet
// time changed. The first Save of a store, and one that finds the
// journal larger than the snapshot, writes a whole snapshot instead.
func (s *Store) Save(path string, now time.Time) error {
	if s.j == nil || s.j.path != path {
		return s.compact(path, now)
	}
	var buf bytes.Buffer
	for p := range s.pending {
		if i, ok := s.index[p]; ok {
			appendRecord(&buf, record{Put: &s.list[i]})
			s.touched[i] = false
			s.peakSaved[i] = s.list[i].PeakRate
		} else {
			appendRecord(&buf, record{Del: &p})
		}
	}
	if now.Sub(s.j.flushed) >= s.RefreshEvery {
		for i, t := range s.touched {
			if t {
				appendRecord(&buf, record{Put: &s.list[i]})
				s.touched[i] = false
				s.peakSaved[i] = s.list[i].PeakRate
			}
		}
		s.j.flushed = now
	}
	if !maps.Equal(s.Baselines, s.j.base) {
		b := maps.Clone(s.Baselines)
		appendRecord(&buf, record{Baselines: &b})
	}
	if buf.Len() == 0 {
		return nil
	}
	if s.j.size+int64(buf.Len()) > max(s.j.snapSize, compactAt) {
		return s.compact(path, now)
	}
	if _, err := s.j.f.Write(buf.Bytes()); err != nil {
		// A partial append is a torn tail Load stops at; the next Save
		// starts over with a snapshot rather than append after it.
		s.closeJournal()
		return fmt.Errorf("appending to the state journal: %w", err)
	}
	if err := s.j.f.Sync(); err != nil {
		s.closeJournal()
		return fmt.Errorf("syncing the state journal: %w", err)
	}
	s.j.size += int64(buf.Len())
	s.j.written += int64(buf.Len())
	s.j.base = maps.Clone(s.Baselines)
	clear(s.pending)
	return nil
}

// Flush is Save without waiting for RefreshEvery: every ban whose rate,
// peak, expiry or quiet time changed since it was last written is written
// now. For a clean stop, after which nothing would write them: a restart
// must find the peaks and expiries the stopped daemon had.
func (s *Store) Flush(path string, now time.Time) error {
	if s.j != nil {
		s.j.flushed = time.Time{}
	}
	return s.Save(path, now)
}

// Dirty reports whether the next Save has changes it must write: bans
// added, removed, moved between tiers, or with a peak grown past what the
// state files hold.
func (s *Store) Dirty() bool { return len(s.pending) > 0 }

func (s *Store) closeJournal() {
	if s.j != nil && s.j.f != nil {
		s.j.f.Close()
		s.j.f = nil
	}
	// Keep the byte count for Written; a nil file makes Save compact.
	if s.j != nil {
		s.j.path = ""
	}
}

func appendRecord(buf *bytes.Buffer, r record) {
	b, err := json.Marshal(r)
	if err != nil {
		// Only a NaN or infinite rate can fail to encode; it must not
		// stop the state from being written.
		if r.Put != nil {
			c := *r.Put
			c.Rate, c.PeakRate = 0, 0
			b, _ = json.Marshal(record{Put: &c})
		}
	}
	fmt.Fprintf(buf, "%08x ", crc32.Checksum(b, castagnoli))
	buf.Write(b)
	buf.WriteByte('\n')
}

// compact writes the whole state as a snapshot of the next generation,
// then starts an empty journal for it.
func (s *Store) compact(path string, now time.Time) error {
	var written int64
	gen := uint64(1)
	if s.j != nil {
		written = s.j.written
		gen = s.j.gen + 1
		if s.j.f != nil {
			s.j.f.Close()
		}
	}
	s.j = nil
	if g := s.loadedGen; g >= gen {
		gen = g + 1
	}
	b, err := json.Marshal(stateFile{Version: stateVersion, Saved: now, Generation: gen, Bans: s.All(), Baselines: s.Baselines})
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	if err := writeAtomic(path, b); err != nil {
		return err
	}
	var hdr bytes.Buffer
	appendRecord(&hdr, record{Gen: &gen})
	jp := journalPath(path)
	if err := writeAtomic(jp, hdr.Bytes()); err != nil {
		return err
	}
	f, err := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the state journal: %w", err)
	}
	s.j = &journal{path: path, f: f, size: int64(hdr.Len()), snapSize: int64(len(b)), gen: gen,
		written: written + int64(len(b)+hdr.Len()), flushed: now, base: maps.Clone(s.Baselines)}
	s.loadedGen = gen
	clear(s.pending)
	clear(s.touched)
	for i := range s.list {
		s.peakSaved[i] = s.list[i].PeakRate
	}
	return nil
}

// writeAtomic replaces path with b: a temporary file in the same
// directory, fsynced, renamed over the old one, directory fsynced. A crash
// leaves the old content or the new one, never a torn file.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: the rename is done; if a crash loses it, Load finds the previous state (or none)
		d.Close()
	}
	return nil
}

// Load reads the state Save wrote (a snapshot and its journal, or a state
// file of an earlier version), dropping bans that expired while nothing
// was running and bans whose prefix is no longer a valid rule (returned as
// unbans). A missing file is an empty store. A torn journal tail is
// dropped with a line in Warnings. The next Save writes a fresh snapshot.
func (s *Store) Load(path string, now time.Time) ([]Unban, error) {
	s.Warnings = nil
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s.reset(nil)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt: %w", path, err)
	}
	if st.Version != 1 && st.Version != stateVersion {
		return nil, fmt.Errorf("state file %s has version %d, this tierwall reads 1 and %d", path, st.Version, stateVersion)
	}
	bans := make(map[netip.Prefix]Ban, len(st.Bans))
	var order []netip.Prefix
	for _, bn := range st.Bans {
		if _, ok := bans[bn.Prefix]; !ok {
			order = append(order, bn.Prefix)
		}
		bans[bn.Prefix] = bn
	}
	base := st.Baselines
	if st.Version >= 2 {
		if err := s.replay(journalPath(path), st.Generation, bans, &order, &base); err != nil {
			return nil, err
		}
	}
	s.reset(base)
	s.loadedGen = st.Generation
	var gone []Unban
	for _, p := range order {
		bn, ok := bans[p]
		if !ok {
			continue
		}
		delete(bans, p) // a prefix listed twice in order counts once
		// One bad entry (edited by hand, written by another version) is
		// dropped and reported; it never stops the daemon from starting.
		if err := rule.CheckPrefix(bn.Prefix); err != nil {
			gone = append(gone, Unban{bn, fmt.Sprintf("dropped from the state file: %v", err)})
			continue
		}
		if !bn.Expires.IsZero() && !now.Before(bn.Expires) {
			gone = append(gone, Unban{bn, "expired while tierwall was not running"})
			continue
		}
		s.put(bn)
		s.peakSaved[len(s.peakSaved)-1] = bn.PeakRate
	}
	clear(s.pending)
	return gone, nil
}

func (s *Store) reset(base map[string]float64) {
	if s.j != nil && s.j.f != nil {
		s.j.f.Close()
	}
	s.j = nil
	s.list, s.prefixes, s.meters, s.touched, s.peakSaved = nil, nil, nil, nil, nil
	s.index, s.pending = map[netip.Prefix]int32{}, map[netip.Prefix]struct{}{}
	s.lengths, s.tiers = nil, nil
	s.Baselines = base
}

// replay applies the journal at jp to bans, if it follows generation gen.
func (s *Store) replay(jp string, gen uint64, bans map[netip.Prefix]Ban, order *[]netip.Prefix, base *map[string]float64) error {
	f, err := os.Open(jp)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the state journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for n := 0; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				s.Warnings = append(s.Warnings, fmt.Sprintf("state journal %s: last record cut short at byte %d (a crash while writing): dropped", jp, off))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the state journal: %w", err)
		}
		rec, ok := parseRecord(line)
		if !ok {
			s.Warnings = append(s.Warnings, fmt.Sprintf("state journal %s: record at byte %d does not check: it and what follows are dropped", jp, off))
			return nil
		}
		off += int64(len(line))
		if n == 0 {
			if rec.Gen == nil || *rec.Gen != gen {
				// The journal of a snapshot a compaction has replaced
				// (a crash between the two writes): the snapshot holds it.
				return nil
			}
			continue
		}
		switch {
		case rec.Put != nil:
			if _, ok := bans[rec.Put.Prefix]; !ok {
				*order = append(*order, rec.Put.Prefix)
			}
			bans[rec.Put.Prefix] = *rec.Put
		case rec.Del != nil:
			delete(bans, *rec.Del)
		case rec.Baselines != nil:
			*base = *rec.Baselines
		}
	}
}

func parseRecord(line []byte) (record, bool) {
	var rec record
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) < 10 || line[8] != ' ' {
		return rec, false
	}
	want, err := strconv.ParseUint(string(line[:8]), 16, 32)
	if err != nil || crc32.Checksum(line[9:], castagnoli) != uint32(want) {
		return rec, false
	}
	if json.Unmarshal(line[9:], &rec) != nil {
		return rec, false
	}
	return rec, true
}

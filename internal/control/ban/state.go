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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

type stateFile struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	// Generation pairs the snapshot with its journal (absent in version 1).
	Generation uint64 `json:"generation,omitempty"`
	// Count is len(Bans), written before them so that Load sizes the
	// store once instead of growing it (absent before; a reader that does
	// not know it ignores it).
	Count     int                `json:"count,omitempty"`
	Bans      []Ban              `json:"bans"`
	Baselines map[string]float64 `json:"baselines,omitempty"`
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
	size, err := writeAtomicFunc(path, func(w io.Writer) error { return s.writeSnapshot(w, now, gen) })
	if err != nil {
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
	s.j = &journal{path: path, f: f, size: int64(hdr.Len()), snapSize: size, gen: gen,
		written: written + size + int64(hdr.Len()), flushed: now, base: maps.Clone(s.Baselines)}
	s.loadedGen = gen
	clear(s.pending)
	clear(s.touched)
	for i := range s.list {
		s.peakSaved[i] = s.list[i].PeakRate
	}
	return nil
}

// writeSnapshot writes the whole state as one JSON object, a stateFile,
// encoding one ban at a time in prefix order: encoding it whole held a
// sorted copy of every ban and the whole encoding at once (~150 MB of
// JSON for 500K bans, and the slices it grew through), at the start when
// the file just read was still being collected.
func (s *Store) writeSnapshot(w io.Writer, now time.Time, gen uint64) error {
	hdr, err := json.Marshal(stateFile{Version: stateVersion, Saved: now, Generation: gen, Count: len(s.list)})
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	// hdr ends in "bans":null}: the bans follow in its place.
	head, ok := bytes.CutSuffix(hdr, []byte(`null}`))
	if !ok {
		return fmt.Errorf("encoding state: unexpected header %s", hdr)
	}
	order := make([]int32, len(s.list))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if lessPrefix(s.prefixes[a], s.prefixes[b]) {
			return -1
		}
		if lessPrefix(s.prefixes[b], s.prefixes[a]) {
			return 1
		}
		return 0
	})
	// bufio keeps the first write error and Flush returns it: the writes
	// below need no check of their own.
	bw := bufio.NewWriterSize(w, 1<<16)
	_, _ = bw.Write(head)
	_ = bw.WriteByte('[')
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for k, i := range order {
		if k > 0 {
			_ = bw.WriteByte(',')
		}
		buf.Reset()
		if err := enc.Encode(&s.list[i]); err != nil {
			// Only a NaN or infinite rate can fail to encode; it must
			// not stop the state from being written.
			c := s.list[i]
			c.Rate, c.PeakRate = 0, 0
			buf.Reset()
			if err := enc.Encode(&c); err != nil {
				return fmt.Errorf("encoding ban %s: %w", c.Prefix, err)
			}
		}
		_, _ = bw.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	_ = bw.WriteByte(']')
	if len(s.Baselines) > 0 {
		b, err := json.Marshal(s.Baselines)
		if err != nil {
			return fmt.Errorf("encoding state: %w", err)
		}
		_, _ = bw.WriteString(`,"baselines":`)
		_, _ = bw.Write(b)
	}
	_ = bw.WriteByte('}')
	return bw.Flush() // the first write error, if any
}

// writeAtomic replaces path with b (see writeAtomicFunc).
func writeAtomic(path string, b []byte) error {
	_, err := writeAtomicFunc(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	return err
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeAtomicFunc replaces path with what write writes, and returns its
// size: a temporary file in the same directory, fsynced, renamed over the
// old one, directory fsynced. A crash leaves the old content or the new
// one, never a torn file.
func writeAtomicFunc(path string, write func(io.Writer) error) (int64, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return 0, fmt.Errorf("writing state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	cw := &countingWriter{w: f}
	if err := write(cw); err != nil {
		f.Close()
		return 0, fmt.Errorf("writing state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, fmt.Errorf("syncing state: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("replacing state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: the rename is done; if a crash loses it, Load finds the previous state (or none)
		d.Close()
	}
	return cw.n, nil
}

// Load reads the state Save wrote (a snapshot and its journal, or a state
// file of an earlier version), dropping bans that expired while nothing
// was running and bans whose prefix is no longer a valid rule (returned as
// unbans). A missing file is an empty store. A torn journal tail is
// dropped with a line in Warnings. The next Save writes a fresh snapshot.
//
// The snapshot is read one ban at a time, each straight into the store:
// reading the whole file, decoding it into a slice and merging that
// through a map held the state about four times over at once, ~2.3 KB a
// ban, which took a restart with 500K bans to the unit's memory limit.
func (s *Store) Load(path string, now time.Time) ([]Unban, error) {
	s.Warnings = nil
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		s.reset(nil)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	s.reset(nil)
	// Nothing read is a change to write: the next Save writes a whole
	// snapshot anyway. Keeping them out of pending spares a set of every
	// prefix.
	s.loading = true
	hdr, err := s.readSnapshot(bufio.NewReaderSize(f, 1<<16), size, func() int { return countBans(f, size) })
	if err != nil {
		s.loading = false
		s.reset(nil)
		return nil, fmt.Errorf("state file %s is corrupt: %w", path, err)
	}
	if hdr.Version != 1 && hdr.Version != stateVersion {
		s.loading = false
		s.reset(nil)
		return nil, fmt.Errorf("state file %s has version %d, this tierwall reads 1 and %d", path, hdr.Version, stateVersion)
	}
	base := hdr.Baselines
	if hdr.Version >= 2 {
		if err := s.replay(journalPath(path), hdr.Generation, &base); err != nil {
			s.loading = false
			s.reset(nil)
			return nil, err
		}
	}
	s.loading = false
	s.Baselines = base
	s.loadedGen = hdr.Generation
	var gone []Unban
	// From the end, so that the ban del moves into a hole was checked.
	for i := len(s.list) - 1; i >= 0; i-- {
		bn := s.list[i]
		// One bad entry (edited by hand, written by another version) is
		// dropped and reported; it never stops the daemon from starting.
		why := ""
		if err := rule.CheckPrefix(bn.Prefix); err != nil {
			why = fmt.Sprintf("dropped from the state file: %v", err)
		} else if !bn.Expires.IsZero() && !now.Before(bn.Expires) {
			why = "expired while tierwall was not running"
		}
		if why != "" {
			s.del(bn.Prefix)
			gone = append(gone, Unban{bn, why})
		}
	}
	slices.Reverse(gone)
	for i := range s.list {
		s.peakSaved[i] = s.list[i].PeakRate
	}
	clear(s.touched)
	clear(s.pending)
	return gone, nil
}

// readSnapshot reads a snapshot token by token, putting each ban into the
// store as it is decoded, and returns the rest of the snapshot (Bans left
// empty). Like json.Unmarshal into stateFile it takes the fields in any
// order, matches their names without regard to case and skips unknown
// ones; a later duplicate of a ban replaces the earlier.
func (s *Store) readSnapshot(r io.Reader, size int64, estimate func() int) (stateFile, error) {
	var st stateFile
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return st, err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return st, err
		}
		key, _ := t.(string)
		switch {
		case strings.EqualFold(key, "version"):
			err = dec.Decode(&st.Version)
		case strings.EqualFold(key, "saved"):
			err = dec.Decode(&st.Saved)
		case strings.EqualFold(key, "generation"):
			err = dec.Decode(&st.Generation)
		case strings.EqualFold(key, "count"):
			if err = dec.Decode(&st.Count); err == nil && len(s.list) == 0 {
				// No ban is written in fewer than minBanJSON bytes: a
				// count the file cannot hold is not believed.
				s.reserve(min(st.Count, int(size/minBanJSON)))
			}
		case strings.EqualFold(key, "baselines"):
			err = dec.Decode(&st.Baselines)
		case strings.EqualFold(key, "bans"):
			if st.Count == 0 && len(s.list) == 0 {
				// A snapshot of an earlier version names no count.
				s.reserve(min(estimate(), int(size/minBanJSON)))
			}
			err = s.readBans(dec)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return st, fmt.Errorf("reading %q: %w", key, err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return st, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return st, errors.New("data after the state's object")
	}
	return st, nil
}

// minBanJSON is less than any ban's encoding takes: its field names
// alone are over 100 bytes.
const minBanJSON = 100

// reserve sizes the store for n bans: growing the slices one append at a
// time allocates about five times their final size on the way (a slice
// this large grows by a quarter), all of it garbage the loading heap
// must hold until it is collected.
func (s *Store) reserve(n int) {
	if n <= 0 {
		return
	}
	s.list = slices.Grow(s.list, n)
	s.prefixes = slices.Grow(s.prefixes, n)
	s.meters = slices.Grow(s.meters, n)
	s.touched = slices.Grow(s.touched, n)
	s.peakSaved = slices.Grow(s.peakSaved, n)
	if len(s.index) == 0 {
		s.index = make(map[netip.Prefix]int32, n)
	}
}

// countBans estimates the bans in the snapshot f of size bytes, for one
// that does not say: the times "prefix" occurs, a pass over the file
// that costs a fraction of decoding it, and at most one slot a ban more
// than needed (a reason that quotes the word is a field's value, escaped).
func countBans(f io.ReaderAt, size int64) int {
	key := []byte(`"prefix"`)
	r := io.NewSectionReader(f, 0, size)
	buf := make([]byte, 1<<16)
	var n, carry int
	for {
		m, err := io.ReadFull(r, buf[carry:])
		chunk := buf[:carry+m]
		n += bytes.Count(chunk, key)
		if err != nil {
			return n
		}
		// Keep the tail that could start a key cut by the chunk's end.
		carry = copy(buf, chunk[len(chunk)-len(key)+1:])
	}
}

// readBans puts each ban of a JSON array (or null) into the store.
func (s *Store) readBans(dec *json.Decoder) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("want an array, found %v", t)
	}
	for dec.More() {
		var b Ban
		if err := dec.Decode(&b); err != nil {
			return err
		}
		s.put(b)
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, found %v", want, t)
	}
	return nil
}

func (s *Store) reset(base map[string]float64) {
	if s.j != nil && s.j.f != nil {
		s.j.f.Close()
	}
	s.j = nil
	s.list, s.prefixes, s.meters, s.touched, s.peakSaved = nil, nil, nil, nil, nil
	s.index, s.pending = map[netip.Prefix]int32{}, map[netip.Prefix]struct{}{}
	s.lengths = nil
	s.Baselines = base
}

// replay applies the journal at jp to the store, if it follows generation
// gen.
func (s *Store) replay(jp string, gen uint64, base *map[string]float64) error {
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
			s.put(*rec.Put)
		case rec.Del != nil:
			s.del(*rec.Del)
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

// SnapshotBans says how many bans the snapshot at path holds, without
// loading it: the count it names, or for a snapshot of an earlier version
// an estimate from its "prefix" keys. 0 for no file. The daemon sizes its
// memory budget with it before it loads a state larger than the rails
// would let it build (written under a larger rails.max_total).
func SnapshotBans(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading state: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading state: %w", err)
	}
	// The header: what precedes "bans" (the writer puts the count
	// first); a key that is not one of the header's ends the search.
	dec := json.NewDecoder(bufio.NewReaderSize(f, 4096))
	if expectDelim(dec, '{') == nil {
	header:
		for dec.More() {
			t, err := dec.Token()
			key, _ := t.(string)
			if err != nil {
				break
			}
			var n int
			switch {
			case strings.EqualFold(key, "count"):
				if dec.Decode(&n) == nil && n > 0 {
					return min(n, int(fi.Size()/minBanJSON)), nil
				}
				break header
			case strings.EqualFold(key, "version"), strings.EqualFold(key, "saved"), strings.EqualFold(key, "generation"):
				var skip json.RawMessage
				if dec.Decode(&skip) != nil {
					break header
				}
			default:
				break header
			}
		}
	}
	return countBans(f, fi.Size()), nil
}

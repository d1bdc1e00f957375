// SPDX-License-Identifier: Apache-2.0

package ipfix

import (
	"testing"

	"github.com/tierwall/tierwall/internal/probe/export/ipfix/ipfixtest"
)

// What the probe could not report goes out as an options record that an
// independent decoder reads back, counted in the sequence like any data
// record; NetFlow v9 sessions send none.
func TestLossOptionsRecord(t *testing.T) {
	e, err := NewEncoder(Options{ObservationDomain: 7})
	if err != nil {
		t.Fatal(err)
	}
	d := ipfixtest.NewDecoder(0)
	rs := []Record{{Proto: 17, Lo: ap("10.0.0.1:1"), Hi: ap("10.9.9.9:2"), App: "dns", Start: t0, End: t0,
		Packets: [2]uint64{1, 0}, Bytes: [2]uint64{64, 0}, Reason: endIdle}}
	for _, m := range e.Encode(rs) {
		if _, err := d.Decode(m.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	ms := e.EncodeLoss(Loss{IgnoredPackets: 592913, NotSentFlows: 3, RefusedFlows: 1200, UntrackedFlows: 45000})
	if len(ms) != 1 || ms[0].Records != 1 {
		t.Fatalf("%d messages, want 1 with one record", len(ms))
	}
	got, err := d.Decode(ms[0].Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sequence != 1 || len(got.Options) != 1 {
		t.Fatalf("sequence %d, %d options records; want 1, 1", got.Sequence, len(got.Options))
	}
	o := got.Options[0]
	want := map[string]uint64{"0/149": 7, "0/164": 592913, "0/166": 3, "32473/4": 1200, "32473/5": 45000}
	for k, v := range want {
		if o[k] != v {
			t.Errorf("element %s = %d, want %d (record %v)", k, o[k], v, o)
		}
	}
	if ms := e.EncodeLoss(Loss{}); len(ms) != 1 {
		t.Fatal("a second loss record not sent")
	} else if got, err := d.Decode(ms[0].Bytes); err != nil || got.Sequence != 2 {
		t.Fatalf("the next message's sequence %d (%v), want 2", got.Sequence, err)
	}

	v9, err := NewEncoder(Options{Format: NetFlow9})
	if err != nil {
		t.Fatal(err)
	}
	if ms := v9.EncodeLoss(Loss{IgnoredPackets: 1}); ms != nil {
		t.Errorf("NetFlow v9 sent %d loss messages", len(ms))
	}
}

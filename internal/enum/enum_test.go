// SPDX-License-Identifier: Apache-2.0

package enum

import (
	"errors"
	"testing"

	"github.com/tierwall/tierwall/internal/errdefs"
)

type colour uint8

var errBad = errdefs.Invalid("bad colour")

var colours = New("colour", errBad, map[colour]string{1: "red", 2: "green", 4: "blue"}).Alias("grey-green", 2).Empty(1)

func TestNames(t *testing.T) {
	for s, want := range map[string]colour{"red": 1, "green": 2, "blue": 4, "grey-green": 2, "": 1} {
		if v, err := colours.Parse(s); err != nil || v != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, v, err, want)
		}
	}
	_, err := colours.Parse("Red")
	if !errors.Is(err, errBad) || !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Parse(Red): %v, want the package's invalid-input error", err)
	}
	if got := err.Error(); got != `bad colour: colour "Red": want red, green or blue` {
		t.Errorf("message %q", got)
	}
	if colours.String(4) != "blue" || colours.String(3) != "colour(3)" || colours.Known(3) || !colours.Known(1) {
		t.Error("String/Known")
	}
	if b, err := colours.Marshal(2); err != nil || string(b) != "green" {
		t.Errorf("Marshal(2) = %s, %v", b, err)
	}
	if _, err := colours.Marshal(9); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Marshal(9): %v", err)
	}
	c := colour(4)
	if err := colours.Unmarshal(&c, []byte("purple")); err == nil || c != 4 {
		t.Errorf("Unmarshal(purple): %v, left %d", err, c)
	}
	if err := colours.Unmarshal(&c, []byte("red")); err != nil || c != 1 {
		t.Errorf("Unmarshal(red): %v, %d", err, c)
	}
}

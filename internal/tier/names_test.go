// SPDX-License-Identifier: Apache-2.0

package tier

import "testing"

// The enums' names are what logs, JSON and the CLI show; a value without
// one (read from a newer peer or a corrupt file) still prints its number.
func TestEnumNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Drop.String(), "drop"}, {Forward.String(), "forward"}, {Action(9).String(), "action(9)"},
		{FlowForward.String(), "forward"}, {FlowDiscard.String(), "discard"}, {FlowAction(0).String(), "flow-action(0)"},
		{LearnDone.String(), "learn-done"}, {LearnFailed.String(), "learn-failed"},
		{LearnIgnored.String(), "learn-ignored"}, {Unlearned.String(), "unlearned"}, {FlowEventKind(7).String(), "event(7)"},
		{CauseIdle.String(), "idle"}, {CauseLifetime.String(), "lifetime"}, {CauseTCPTerm.String(), "tcp-term"},
		{CauseApp.String(), "app"}, {CauseFlush.String(), "flush"}, {Cause(6).String(), "unlearn-cause(6)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
	for c := CauseIdle; c <= CauseFlush; c++ {
		b, _ := c.MarshalText()
		var back Cause
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Errorf("%v: read back as %v, %v", c, back, err)
		}
	}
	var c Cause
	if err := c.UnmarshalText([]byte("unlearn-cause(6)")); err == nil {
		t.Error("an unnamed cause was read")
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package dpi names the application of a new flow from its first packets,
// so that the flow probe can decide what the NIC does with it once it is
// learned. Two classifiers implement one interface: a small built-in one in
// pure Go (DNS, HTTP/1.x, TLS SNI, QUIC, SSH, NTP, DHCP, mail banners) that
// the default build and its tests use, and nDPI through cgo behind the
// ndpi build tag. Both report the same lower-case application names, which
// a Policy maps to an action.
package dpi

import (
	"errors"
	"fmt"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// ErrClosed is returned by a classifier used after Close.
var ErrClosed = errors.New("classifier closed")

// Source is how a verdict was reached, from weakest to strongest.
type Source uint8

const (
	SourceNone  Source = 0 // no classification: App is "unknown"
	SourcePort  Source = 1 // guessed from a well-known port at give-up
	SourceIP    Source = 2 // from the addresses alone (nDPI's IP lists)
	SourceCache Source = 3 // correlated with another flow (nDPI's caches)
	SourceDPI   Source = 4 // from the payload
)

func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourcePort:
		return "port"
	case SourceIP:
		return "ip"
	case SourceCache:
		return "cache"
	case SourceDPI:
		return "dpi"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Verdict is a classifier's answer about a flow.
type Verdict struct {
	// Done: the classifier will not change its mind; the engine stops
	// feeding the flow and learns it.
	Done bool
	// App is the most specific application, lower-case ("dns", "tls",
	// "youtube", …; AppUnknown when none). Proto is the protocol it is
	// carried by ("tls" for "youtube"), equal to App when there is no
	// finer name. Policies look App up first, then Proto.
	App   string
	Proto string
	// Category is the application's category, lower-case nDPI category
	// names ("web", "network", "remoteaccess", "email", …, "unspecified").
	Category string
	// Host is the name the flow is about: TLS SNI, HTTP Host, DNS query
	// name; lower-case, without a trailing dot. Empty when unknown.
	Host   string
	Source Source
}

func (v Verdict) String() string {
	app := v.App
	if v.Proto != "" && v.Proto != v.App {
		app = v.Proto + "." + v.App
	}
	s := fmt.Sprintf("%s (%s, %s)", app, v.Category, v.Source)
	if v.Host != "" {
		s += " host " + v.Host
	}
	if !v.Done {
		s += " pending"
	}
	return s
}

// Classifier creates per-flow DPI state. A classifier and its flows are
// used by one goroutine at a time (nDPI's detection module is not
// thread-safe); run one classifier per goroutine to scale.
type Classifier interface {
	// NewFlow starts classifying the flow key whose initiator (the side
	// that sent the first packet) is direction initDir of the key.
	NewFlow(key tier.FlowKey, initDir uint8) Flow
	// Name is the classifier's name for logs and metrics ("builtin",
	// "ndpi").
	Name() string
	// Close releases the classifier; its flows must be closed first.
	Close() error
}

// Flow is one flow's DPI state. The engine calls Add with the flow's
// samples in order until a verdict is Done, or Giveup once it stops
// waiting (after N samples or a timeout), then Close, always: flows may
// hold C memory that the Go collector does not see. A Flow is small: the
// built-in classifier keeps under 100 bytes and allocates at most
// maxReassembly bytes while a TLS ClientHello spans segments; an nDPI flow
// is sizeof(struct ndpi_flow_struct) (688 bytes in 4.2) plus what nDPI
// allocates for the flow's metadata (host names, TLS fields).
type Flow interface {
	// Add feeds one sample of the flow. After a Done verdict further
	// calls return the same verdict.
	Add(s *flow.Sample) Verdict
	// Giveup returns the final verdict, Done, with a guess from the ports
	// when nothing was recognized (Source SourcePort) or AppUnknown.
	Giveup() Verdict
	// Close releases the flow; it must not be used afterwards.
	Close()
}

// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig names and bounds the JetStream stream the aggregates go
// through; zero fields take the defaults in parentheses.
type StreamConfig struct {
	// Name is the stream's (TIERWALL_AGGREGATES), Subject the prefix of
	// its subjects, one per partition: Subject.0 … Subject.N-1
	// (tierwall.aggregates).
	Name, Subject string
	// MaxAge (30s): an aggregate older than a few windows no longer moves
	// a rate; the stream keeps enough for a restarted detector to rebuild
	// its sums (DetectorConfig.Replay), and no more.
	MaxAge time.Duration
	// MaxBytes (256 MiB) bounds the server's memory whatever the
	// collectors send; the oldest aggregates go first.
	MaxBytes int64
	// MaxMsgSize (1 MiB): NATS's default payload limit.
	MaxMsgSize int32
	// Replicas (1): 3 on a NATS cluster, so that losing a server loses
	// no partition.
	Replicas int
}

func (c *StreamConfig) defaults() {
	if c.Name == "" {
		c.Name = "TIERWALL_AGGREGATES"
	}
	if c.Subject == "" {
		c.Subject = "tierwall.aggregates"
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 30 * time.Second
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 256 << 20
	}
	if c.MaxMsgSize <= 0 {
		c.MaxMsgSize = 1 << 20
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
}

// EnsureStream creates the stream, or updates its limits to c's: every
// collector and detector calls it at start, so none depends on another
// having started first.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c.defaults()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     c.Name,
		Subjects: []string{c.Subject + ".*"},
		// Memory: an aggregate lives seconds, and a disk write per
		// message would be the collector's bottleneck.
		Storage:    jetstream.MemoryStorage,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
		MaxAge:     c.MaxAge,
		MaxBytes:   c.MaxBytes,
		MaxMsgSize: c.MaxMsgSize,
		Replicas:   c.Replicas,
		// No de-duplication window: a batch is never re-sent with the
		// same ID (a lost one is counted, not retried).
		Duplicates: 0,
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", c.Name, err)
	}
	return s, nil
}

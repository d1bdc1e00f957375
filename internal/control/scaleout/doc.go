// SPDX-License-Identifier: Apache-2.0

// Package scaleout runs network mode beyond one process: collectors
// decode their routers' telemetry and count it per destination over one
// tick (telemetry.Partial), and publish the aggregates to NATS JetStream
// on subjects partitioned by destination (its host group, else its /24 or
// /48), so that the detector owning a partition receives every router's
// share of each of its victims and feeds it to network mode's own
// detector (telemetry.Detector.AddAggregates). NATS carries, bounds and
// replays the aggregates; this package adds only the partitioning, the
// wire format and the bounds on its own queues. docs/SCALEOUT.md has the
// design.
//
// The pieces, one file each: the partitioning (partition.go), the wire
// format (wire.go), the stream (stream.go), the collector's publishing
// side (collect.go) and the detector's consuming side (detect.go).
package scaleout

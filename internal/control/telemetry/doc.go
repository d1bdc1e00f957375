// SPDX-License-Identifier: Apache-2.0

// Package telemetry is network mode's input and its detector: it collects
// the sampled flow telemetry routers export (sFlow v5, NetFlow v5 and v9,
// IPFIX), decoded with goflow2's decoders, turns every flow sample or flow
// record into a Record scaled by its sampling rate, and judges the network's
// destinations and host groups on sub-second windows, so that a flood is
// named from the feed alone and can be stopped upstream (FlowSpec, then a
// victim blackhole). It keeps its own state bounded whatever the routers, or
// someone spoofing them, send: exporters, templates, destinations.
//
// The pieces, one file each: the datagram decoder with its per-exporter
// state (decode.go, exporter.go, templates.go, header.go), the UDP collector
// (collector.go), the per-destination counters and detection (detect.go),
// the upstream ladder (action.go) and the metrics (metrics.go).
package telemetry

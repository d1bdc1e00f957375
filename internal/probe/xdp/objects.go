// SPDX-License-Identifier: Apache-2.0

package xdp

import "github.com/cilium/ebpf"

// Spec is the flow probe's object as compiled (bpf/probe/xdp_probe.c), for the
// kernel check (internal/control/kernel) to load and report on.
func Spec() (*ebpf.CollectionSpec, error) { return loadProbe() }

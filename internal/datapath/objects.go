// SPDX-License-Identifier: Apache-2.0

package datapath

import "github.com/cilium/ebpf"

// FilterSpec is the filter's object as compiled (bpf/filter/xdp_filter.c), for
// the kernel check (internal/control/kernel) to load and report on.
func FilterSpec() (*ebpf.CollectionSpec, error) { return loadFilter() }

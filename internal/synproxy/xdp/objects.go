// SPDX-License-Identifier: Apache-2.0

package xdp

import "github.com/cilium/ebpf"

// Spec is the SYN-cookie stage's object as compiled (bpf/synproxy/xdp_synproxy.c),
// for the kernel check (internal/control/kernel) to load and report on.
func Spec() (*ebpf.CollectionSpec, error) { return loadSynproxy() }

// SPDX-License-Identifier: Apache-2.0

package synproxy

import "github.com/cilium/ebpf"

// Spec is the SYN-cookie stage's object as compiled (bpf/xdp_synproxy.c),
// for the kernel check (internal/datapath/kernel) to load and report on.
func Spec() (*ebpf.CollectionSpec, error) { return loadSynproxy() }

// SPDX-License-Identifier: Apache-2.0

//go:build !ndpi

package main

// ndpiBuiltIn: this binary was built without the ndpi tag, so
// probe.dpi.engine: ndpi cannot run (run --check says so, run refuses).
const ndpiBuiltIn = false

// SPDX-License-Identifier: Apache-2.0

//go:build ndpi

package main

// ndpiBuiltIn: built with -tags ndpi, against libndpi (cgo).
const ndpiBuiltIn = true

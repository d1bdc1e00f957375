//go:build ndpi

package main

// ndpiBuiltIn: built with -tags ndpi, against libndpi (cgo).
const ndpiBuiltIn = true

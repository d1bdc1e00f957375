// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"
)

// lab status --json prints one object with the lab's state and addresses
// (read-only: it builds and removes nothing).
func TestLabStatusJSON(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	root := newRoot()
	root.SetArgs([]string{"lab", "status", "--json"})
	err = root.Execute()
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"up", "ready", "namespaces", "host4", "host6", "client4", "client6"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if got["host4"] != "10.70.0.1" {
		t.Errorf("host4 %v", got["host4"])
	}
}

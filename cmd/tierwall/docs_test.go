// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/config"
)

// configKeys is every field name of the configuration, at any depth.
func configKeys(t reflect.Type, into map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name != "" {
			into[name] = true
		}
		configKeys(f.Type, into)
	}
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// Every YAML example of README.md and docs/ that is a tierwall
// configuration (or a piece of one) is one the daemon accepts:
// docs/FLOW-EXPORT.md showed a top-level export: that it refuses (the
// section is probe.export).
func TestDocumentedConfigsLoad(t *testing.T) {
	root := repoRoot(t)
	keys := map[string]bool{}
	configKeys(reflect.TypeOf(config.Config{}), keys)
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	n := 0
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
			var top map[string]any
			if yaml.Unmarshal([]byte(m[1]), &top) != nil {
				continue
			}
			ours := false
			for k := range top {
				ours = ours || keys[k]
			}
			if !ours {
				continue // another program's (prometheus.yml)
			}
			n++
			text := m[1]
			if _, ok := top["interface"]; !ok {
				text = "interface: eth0\n" + text
			}
			if _, err := config.ParseFile(filepath.Base(doc), []byte(text)); err != nil {
				t.Errorf("%s: a documented configuration is refused:\n%s\n%v", filepath.Base(doc), m[1], err)
			}
		}
	}
	if n < 3 {
		t.Errorf("found only %d configuration examples", n)
	}
}

// README.md had two "Scraping" sections, and following its nic attach
// alone left ping at 100% loss: the two ports must be bridged, which it
// did not say (nor show).
func TestReadme(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "## ") {
			if seen[l] {
				t.Errorf("README.md has %q twice", l)
			}
			seen[l] = true
		}
	}
	nic := regexp.MustCompile("(?s)ip link set WIRE master (\\S+)\nip link set HOST master (\\S+)\n.*?tierwall nic attach -i WIRE HOST")
	if m := nic.FindStringSubmatch(string(b)); m == nil || m[1] != m[2] {
		t.Error("README.md does not show bridging WIRE and HOST before tierwall nic attach")
	}
}

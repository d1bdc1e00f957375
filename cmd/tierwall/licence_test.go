// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// generated is a file a generator writes (bpf2go's bindings): its header
// is the generator's, and regenerating would drop a line added by hand.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// Every Go source file of ours opens with its licence (Apache-2.0); the
// repository had none at all.
func TestGoFilesHaveSPDX(t *testing.T) {
	root := repoRoot(t)
	n := 0
	for _, top := range []string{"cmd", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasSuffix(p, "_bpfel.go") || generated.Match(b) {
				return nil
			}
			n++
			if !strings.HasPrefix(string(b), "// SPDX-License-Identifier: Apache-2.0\n") {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s: first line is not // SPDX-License-Identifier: Apache-2.0", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 100 {
		t.Fatalf("checked only %d files", n)
	}
}

// The licences the SPDX lines name are in the repository, and
// deploy/debian/copyright is machine readable (DEP-5): every licence a
// Files paragraph names has its own paragraph with the text.
// The BPF C is dual-licensed, as cilium's and xdp-tools' is: GPL-2.0 for
// the kernel's GPL-only helpers and kfuncs, BSD-2-Clause for everyone who
// reuses it. Every program and header of bpf/ (the vendored bpf/include
// keeps its own) says so on its first line, and every program's license
// section is the kernel's spelling of it.
func TestBPFFilesHaveSPDX(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "bpf", "*.c"))
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := filepath.Glob(filepath.Join(root, "bpf", "lib", "*.h"))
	files = append(files, hs...)
	if len(files) < 20 {
		t.Fatalf("found only %d BPF files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		rel, _ := filepath.Rel(root, f)
		if first != "// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause" && first != "/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */" {
			t.Errorf("%s: first line %q, want the SPDX line GPL-2.0-only OR BSD-2-Clause", rel, first)
		}
		if strings.HasSuffix(f, ".c") && !strings.Contains(string(b), `SEC("license") = "Dual BSD/GPL";`) {
			t.Errorf("%s: license section is not \"Dual BSD/GPL\"", rel)
		}
	}
}

func TestLicenceFiles(t *testing.T) {
	root := repoRoot(t)
	for _, f := range []string{"LICENSE", "LICENSES/Apache-2.0.txt", "LICENSES/GPL-2.0-only.txt", "LICENSES/BSD-2-Clause.txt"} {
		if st, err := os.Stat(filepath.Join(root, f)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	f, err := os.Open(filepath.Join(root, "deploy/debian/copyright"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paras []map[string]string
	cur, key := map[string]string{}, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.TrimSpace(l) == "":
			if len(cur) > 0 {
				paras = append(paras, cur)
			}
			cur, key = map[string]string{}, ""
		case l[0] == ' ' || l[0] == '\t':
			if key == "" {
				t.Fatalf("continuation line outside a field: %q", l)
			}
			cur[key] += "\n" + l
		default:
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				t.Fatalf("not a field: %q", l)
			}
			key, cur[k] = k, strings.TrimSpace(v)
		}
	}
	if len(cur) > 0 {
		paras = append(paras, cur)
	}
	if len(paras) == 0 || !strings.HasPrefix(paras[0]["Format"], "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0") {
		t.Fatalf("no DEP-5 header paragraph")
	}
	texts, used := map[string]bool{}, map[string]bool{}
	all := false
	for _, p := range paras[1:] {
		lic, ok := p["License"]
		if !ok {
			t.Errorf("paragraph without License: %v", p)
			continue
		}
		name, _, _ := strings.Cut(lic, "\n")
		if files, ok := p["Files"]; ok {
			all = all || strings.HasPrefix(files, "*")
			if p["Copyright"] == "" {
				t.Errorf("Files: %s: no Copyright", files)
			}
			for _, alt := range regexp.MustCompile(` or | and `).Split(name, -1) {
				used[alt] = true
			}
			if strings.Contains(files, "bpf/*.c") && name != "GPL-2.0-only or BSD-2-Clause" {
				t.Errorf("the BPF C is %q, want GPL-2.0-only or BSD-2-Clause", name)
			}
		} else if strings.Contains(lic, "\n") {
			texts[name] = true
		}
	}
	if !all {
		t.Error("no Files: * paragraph")
	}
	for l := range used {
		if !texts[l] {
			t.Errorf("licence %q has no paragraph with its text", l)
		}
	}
}

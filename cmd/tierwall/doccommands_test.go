// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// Every command a reader is shown works (issue 34): the commands are read
// from README.md, docs/*.md and the man page at test time, never copied
// here, so a document that changes is tested as it now reads. Each
// tierwall command must parse against the real command tree; those that
// can run, run against a daemon and a probe this test starts on veth
// pairs, and must exit as the document says (0 unless its comment names
// an exit code). Every other command shown is either run too (ip, curl),
// checked (make: a real target), or on notRun with the reason.

// docCommand is one command line a document shows.
type docCommand struct {
	where   string // file:line
	text    string // as written, continuation lines joined, comment cut
	comment string
	// inline is a command named in running text (`tierwall victims`):
	// it names a command and its flags, not a whole invocation, so its
	// argument count is not checked and it is not run.
	inline bool
}

// notRun is every command a document shows that this test does not run,
// by the prefix of its text as written, with the reason. Anything else
// that is not tierwall, ip, curl or make fails the test: a document that
// shows a command nobody can run fails the build.
var notRun = map[string]string{
	// Change the host: test/install installs into a DESTDIR, checks the
	// unit with systemd-analyze and builds and inspects the package.
	"systemctl ":   "starts, enables or reloads the host's service",
	"journalctl ":  "reads the host's journal; no tierwall.service runs in a test",
	"$EDITOR ":     "opens an editor on the host's configuration",
	"apt install ": "installs a package on the host",
	// The testbed: parsed against its own command tree (runTierwallLab
	// with --help) but not run, as it holds the shared lab (lab.Hold)
	// for minutes; make demo and the eval targets run it.
	"tierwall-lab ": "takes the machine's shared lab for minutes (make demo, make eval*)",
	// The daemon and the probe are what this test starts, from the
	// documented configurations (deploy/tierwall.yaml, deploy/probe.yaml).
	"tierwall run ": "started by this test as its daemon and its probe",
	// An attack's ID exists only after a flood: test/e2e/alerts_test.go
	// floods a daemon and runs both on the attack it reports.
	"tierwall attacks show": "needs an attack the daemon saw",
	"tierwall attacks pcap": "needs an attack the daemon saw",
	// It would take every tierwall pin and record on the machine, other
	// tests' too; TestCleanup runs it on a private tree. Its --dry-run
	// changes nothing and runs here.
	"tierwall cleanup": "removes what every tierwall on the host left",
}

// liveCommands run until interrupted: each must still be running (or
// have exited 0) after a moment, and stop cleanly on SIGINT.
var liveCommands = []string{"watch"}

var (
	fence      = regexp.MustCompile("(?s)```(sh|bash|shell|console)\n(.*?)```")
	inlineSpan = regexp.MustCompile("`((?:tierwall|tierwall-lab|make)\\s[^`]*)`")
)

// splitComment cuts a shell comment (" #" outside quotes) off line.
func splitComment(line string) (cmd, comment string) {
	var q rune
	for i, r := range line {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
}

// splitOps splits a line at the shell's list and pipe operators outside
// quotes ("a && b", "a | b"; a|b without spaces is a pattern's
// alternatives), so that each command is checked on its own.
func splitOps(line string) []string {
	var out []string
	var q rune
	last := 0
	for i, r := range line {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == ' ':
			for _, op := range []string{" && ", " || ", " ; ", " | ", "; "} {
				if strings.HasPrefix(line[i:], op) && i >= last {
					out = append(out, strings.TrimSpace(line[last:i]))
					last = i + len(op)
				}
			}
		case r == ';' && i == len(line)-1:
			out = append(out, strings.TrimSpace(line[last:i]))
			last = len(line)
		}
	}
	if rest := strings.TrimSpace(line[min(last, len(line)):]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// markdownCommands is every command of a Markdown file: each line of its
// shell code blocks, and the tierwall and make commands in its running
// text.
func markdownCommands(name, text string) []docCommand {
	var out []docCommand
	for _, m := range fence.FindAllStringSubmatchIndex(text, -1) {
		line := strings.Count(text[:m[4]], "\n") + 1
		lines := strings.Split(text[m[4]:m[5]], "\n")
		for i := 0; i < len(lines); i++ {
			start := line + i
			l := strings.TrimPrefix(strings.TrimSpace(lines[i]), "$ ")
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
			}
			cmd, comment := splitComment(l)
			if cmd == "" {
				continue
			}
			out = append(out, docCommand{where: fmt.Sprintf("%s:%d", name, start), text: cmd, comment: comment})
		}
	}
	// Running text, outside the code blocks.
	prose := fence.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat("\n", strings.Count(s, "\n")) })
	prose = regexp.MustCompile("(?s)```.*?```").ReplaceAllStringFunc(prose, func(s string) string { return strings.Repeat("\n", strings.Count(s, "\n")) })
	for _, m := range inlineSpan.FindAllStringSubmatchIndex(prose, -1) {
		line := strings.Count(prose[:m[2]], "\n") + 1
		cmd, comment := splitComment(strings.Join(strings.Fields(prose[m[2]:m[3]]), " "))
		out = append(out, docCommand{where: fmt.Sprintf("%s:%d", name, line), text: cmd, comment: comment, inline: true})
	}
	return out
}

// roffArgs splits a macro line's arguments, honouring double quotes.
func roffArgs(s string) []string {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				end = len(s) - 1
			}
			out = append(out, s[1:1+end])
			s = s[min(len(s), end+2):]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// roffText renders one roff line as the text it shows: the font macros'
// arguments (alternating ones joined without spaces), escapes resolved.
func roffText(l string) string {
	macro, rest, _ := strings.Cut(l, " ")
	switch macro {
	case ".BR", ".RB", ".IR", ".RI", ".BI", ".IB":
		l = strings.Join(roffArgs(rest), "")
	case ".B", ".I":
		l = strings.Join(roffArgs(rest), " ")
	}
	return strings.NewReplacer(`\-`, "-", `\fB`, "", `\fR`, "", `\fI`, "", `\fP`, "", `\(lq`, `"`, `\(rq`, `"`, `\e`, `\`).Replace(l)
}

// manCommands is every command of the man page: each line of its .nf
// (example) blocks, and each ".B tierwall ..." with the font macro lines
// that continue it (the synopsis, up to its .br).
func manCommands(name, text string) []docCommand {
	var out []docCommand
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		switch {
		case lines[i] == ".nf":
			for i++; i < len(lines) && lines[i] != ".fi"; i++ {
				if cmd, comment := splitComment(roffText(lines[i])); cmd != "" {
					out = append(out, docCommand{where: fmt.Sprintf("%s:%d", name, i+1), text: cmd, comment: comment})
				}
			}
		case lines[i] == ".B tierwall" || strings.HasPrefix(lines[i], ".B tierwall "):
			start := i
			parts := []string{roffText(lines[i])}
			for i+1 < len(lines) && regexp.MustCompile(`^\.(B|I|BR|RB|IR|RI|BI|IB) `).MatchString(lines[i+1]) &&
				!strings.HasPrefix(lines[i+1], ".B tierwall") {
				i++
				parts = append(parts, roffText(lines[i]))
			}
			if text := strings.Join(parts, " "); text != "tierwall" { // not the program named in running text
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", name, start+1), text: text})
			}
		}
	}
	return out
}

// documentedCommands reads every command of README.md, docs/*.md and
// deploy/tierwall.8, in that order.
func documentedCommands(t *testing.T) []docCommand {
	t.Helper()
	root := repoRoot(t)
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	var out []docCommand
	for _, f := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out = append(out, markdownCommands(rel, string(b))...)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/tierwall.8"))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, manCommands("deploy/tierwall.8", string(b))...)
	var split []docCommand
	for _, c := range out {
		for _, part := range splitOps(c.text) {
			c.text = part
			split = append(split, c)
		}
	}
	return split
}

// shellWords splits a command line as sh would (quotes, no expansion).
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	in, q := false, rune(0)
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// expand turns a documented pattern into the concrete command lines it
// stands for: each a|b word is one line per alternative (products of
// several), [optional] parts are kept (their flags must exist too), and a
// lone "..." (more of the same) is dropped.
func expand(words []string) [][]string {
	out := [][]string{nil}
	for _, w := range words {
		w = strings.Trim(w, "[]")
		if w == "" || w == "..." || w == "…" {
			continue
		}
		alts := []string{w}
		if strings.Contains(w, "|") && !strings.ContainsAny(w, "{}'\"") {
			alts = strings.Split(w, "|")
		}
		var next [][]string
		for _, o := range out {
			for _, a := range alts {
				next = append(next, append(append([]string(nil), o...), a))
			}
		}
		out = next
	}
	return out
}

// docEnv is where a documented command runs: the values its placeholders
// stand for there.
type docEnv struct {
	netns  string // -n
	iface  string // eth0, IFACE
	wire   string // WIRE (the emulated NIC's ports)
	host   string // HOST
	nicNS  string // the namespace holding WIRE and HOST
	socket string // a probe's --socket ("" where the owner record finds the daemon)
	feed   string // feed.txt
	config string // FILE after --config
}

// docFlowRule is what RULE stands for: a flow rule the daemon accepts.
const docFlowRule = "dst 198.51.100.7/32 proto udp sport 53 drop"

// substitute replaces a concrete command's placeholders.
func (e docEnv) substitute(words []string) []string {
	out := make([]string, 0, len(words))
	for i, w := range words {
		base := strings.TrimSuffix(strings.TrimSuffix(w, "..."), "…")
		switch base {
		case "eth0", "eth1", "IFACE":
			w = e.iface
		case "WIRE":
			w = e.wire
		case "HOST":
			w = e.host
		case "SOURCE", "ADDR":
			w = "192.0.2.77"
		case "PREFIX":
			w = "192.0.2.0/24"
		case "feed.txt":
			w = e.feed
		case "ID":
			w = "1"
		case "MAC":
			w = "02:00:00:00:00:01"
		case "NETNS", "NS":
			w = e.netns
		case "DURATION":
			w = "1s"
		case "N", "A":
			w = "5"
		case "RULE":
			out = append(out, strings.Fields(docFlowRule)...)
			continue
		case "FILE":
			if i > 0 && words[i-1] == "--config" {
				w = e.config
			} else {
				w = e.feed
			}
		}
		out = append(out, w)
	}
	return out
}

// parseOnly checks args (a tierwall command line without the program
// name) against the command tree as cobra would before running it: a
// known command, known flags, and, unless inline, the argument count. It
// also refuses the interface as a positional argument where the command
// takes -i (deprecated: a document must show the current form).
func parseOnly(args []string, inline bool) error {
	g = globals{}
	root := newRoot()
	// Added by Execute, which this does not call.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); errors.Is(err, pflag.ErrHelp) {
		return nil // --help: any command answers it (TestEveryCommandHelpAndCompletion)
	} else if err != nil {
		return err
	}
	pos := cmd.Flags().Args()
	if cmd.HasSubCommands() && !cmd.Runnable() && len(pos) > 0 {
		return fmt.Errorf("unknown command %q for %q", pos[0], cmd.CommandPath())
	}
	if strings.Contains(cmd.Use, " -i ") && !cmd.Flags().Changed("interface") && !cmd.Flags().Changed("iface") &&
		(len(pos) > 0 || !inline) {
		return fmt.Errorf("%s: shows the interface without -i (%q)", cmd.CommandPath(), cmd.Use)
	}
	if inline {
		return nil
	}
	if cmd.HasSubCommands() && len(pos) == 0 && !cmd.Runnable() {
		return fmt.Errorf("%s needs a subcommand", cmd.CommandPath())
	}
	if err := cmd.ValidateArgs(pos); err != nil {
		return err
	}
	return cmd.ValidateRequiredFlags()
}

// makeTargets is every target the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_.\- ]+?)\s*::?(?:[^=]|$)`).FindAllStringSubmatch(string(b), -1) {
		for _, name := range strings.Fields(m[1]) {
			if !strings.HasPrefix(name, ".") {
				targets[name] = true
			}
		}
	}
	return targets
}

// notRunReason is why c is not run, "" when it is.
func notRunReason(text string) string {
	for p, why := range notRun {
		if p == "tierwall cleanup" && strings.Contains(text, "--dry-run") {
			continue
		}
		if strings.HasPrefix(text, p) || text+" " == p {
			return why
		}
	}
	return ""
}

// checkParse is the unprivileged half: every documented command is one
// the reader can type.
func checkParse(t *testing.T, c docCommand, targets map[string]bool) {
	t.Helper()
	words := shellWords(c.text)
	if len(words) == 0 {
		return
	}
	env := docEnv{netns: "twdoc", iface: "eth9", wire: "wire9", host: "host9", feed: "feed.txt", config: "tierwall.yaml"}
	switch words[0] {
	case "tierwall":
		for _, w := range expand(words[1:]) {
			if len(w) > 0 && w[0] == "SUBCOMMAND" {
				continue
			}
			if i := indexOf(w, "SUBCOMMAND"); i >= 0 {
				// "hw|nic SUBCOMMAND ...": a group of subcommands.
				cmd, _, err := newRoot().Find(w[:i])
				if err != nil || !cmd.HasSubCommands() {
					t.Errorf("%s: %q: %v has no subcommands", c.where, c.text, w[:i])
				}
				continue
			}
			if err := parseOnly(env.substitute(w), c.inline); err != nil {
				t.Errorf("%s: %q: tierwall %s: %v", c.where, c.text, strings.Join(w, " "), err)
			}
		}
	case "make":
		for _, w := range expand(words[1:]) {
			for _, a := range w {
				if !strings.Contains(a, "=") && !strings.HasPrefix(a, "-") && !targets[a] {
					t.Errorf("%s: %q: the Makefile has no target %q", c.where, c.text, a)
				}
			}
		}
	case "tierwall-lab", "ip", "curl":
		// tierwall-lab is parsed against its own tree (it needs its
		// binary: TestDocumentedCommandsRun); ip and curl run there.
	default:
		if !c.inline && notRunReason(c.text) == "" {
			t.Errorf("%s: %q: a command this test neither runs nor lists in notRun with a reason", c.where, c.text)
		}
	}
}

func indexOf(ws []string, s string) int {
	for i, w := range ws {
		if w == s {
			return i
		}
	}
	return -1
}

// Every tierwall command README.md, docs/*.md and the man page show parses
// against the command tree (known command and flags, argument count),
// every make command names a real target, and every other command is run
// by TestDocumentedCommandsRun or listed in notRun with the reason.
func TestDocumentedCommandsParse(t *testing.T) {
	cmds := documentedCommands(t)
	per := map[string]int{}
	for _, c := range cmds {
		file, _, _ := strings.Cut(c.where, ":")
		if strings.HasPrefix(c.text, "tierwall ") {
			per[file]++
		}
	}
	// The extraction itself must keep finding what the documents show.
	for file, least := range map[string]int{"README.md": 20, "deploy/tierwall.8": 10, "docs/ARCHITECTURE.md": 3, "docs/BGP.md": 3} {
		if per[file] < least {
			t.Errorf("%s: found %d tierwall commands, want at least %d (did the extraction break?)", file, per[file], least)
		}
	}
	targets := makeTargets(t)
	for _, want := range []string{"build", "test", "install", "deb", "eval"} {
		if !targets[want] {
			t.Fatalf("Makefile parse found no %q target: %v", want, targets)
		}
	}
	for _, c := range cmds {
		checkParse(t, c, targets)
	}
}

// wantExit is the exit codes a command's comment gives: "exits 2" is 2,
// "exit 1 if one is refused" is 0 or 1 (docs/KERNELS.md's doctor), and
// none named is 0.
func wantExit(comment string) []int {
	m := regexp.MustCompile(`\bexits? (?:with (?:code )?)?(\d)\b( (?:if|when|unless|on|for)\b)?`).FindStringSubmatch(comment)
	if m == nil {
		return []int{0}
	}
	n, _ := strconv.Atoi(m[1])
	if m[2] != "" {
		return []int{0, n}
	}
	return []int{n}
}

// Every documented command that can run, runs: a daemon (from
// deploy/tierwall.yaml) and a probe (from deploy/probe.yaml) on veth
// pairs, a namespace with a filter attached and none of them (the
// README's direct use), and one with the emulated NIC's two ports. Each
// command must exit as its document says, without a panic or a refused
// flag, in document order (so a detach is followed by the attach the
// next command assumes).
func TestDocumentedCommandsRun(t *testing.T) {
	testutil.RequireRoot(t)
	root := repoRoot(t)
	dir := t.TempDir()
	tw := filepath.Join(dir, "tierwall")
	lab := filepath.Join(dir, "tierwall-lab")
	for _, b := range [][2]string{{tw, "./cmd/tierwall"}, {lab, "./cmd/tierwall-lab"}} {
		build := exec.Command("go", "build", "-o", b[0], b[1])
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b[1], err, out)
		}
	}

	const (
		nsD, ifD       = "twdoc-d", "twdoc-d1" // the daemon
		nsP, ifP       = "twdoc-p", "twdoc-p1" // the probe
		nsL, ifL       = "twdoc-l", "twdoc-l1" // direct use, no daemon
		nsN, wire, hst = "twdoc-n", "twdoc-nw", "twdoc-nh"
	)
	for _, p := range [][4]string{
		{"twdoc-dt", "twdoc-d0", nsD, ifD}, {"twdoc-pt", "twdoc-p0", nsP, ifP},
		{"twdoc-lt", "twdoc-l0", nsL, ifL}, {"twdoc-nt", "twdoc-n0", nsN, wire},
	} {
		cleanup, err := harness.VethPair(p[0], p[1], p[2], p[3])
		if err != nil {
			t.Fatal(err)
		}
		ns := p[2]
		t.Cleanup(func() {
			cleanup()
			removeLocks(t, "*_ns_"+ns+"_*.lock")
		})
	}
	// HOST, the emulated NIC's host-facing port, beside WIRE.
	for _, c := range [][]string{
		{"ip", "link", "add", hst, "netns", nsN, "type", "veth", "peer", "name", "twdoc-n9", "netns", "twdoc-nt"},
		{"ip", "-n", nsN, "link", "set", hst, "up"}, {"ip", "-n", "twdoc-nt", "link", "set", "twdoc-n9", "up"},
	} {
		if err := harness.Run(c...); err != nil {
			t.Fatal(err)
		}
	}

	// The daemon and the probe from the shipped configurations, with only
	// what names this host changed.
	localize := func(src, iface, name string) (cfg, sock string) {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		sock = filepath.Join(dir, name+".sock")
		s := regexp.MustCompile(`(?m)^interface: \S+`).ReplaceAllString(string(b), "interface: "+iface)
		s = regexp.MustCompile(`(?m)^state_file: \S+`).ReplaceAllString(s, "state_file: "+filepath.Join(dir, name+"-state.json"))
		s = strings.Replace(s, "socket: /run/tierwall/api.sock", "socket: "+sock, 1)
		cfg = filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg, sock
	}
	dCfg, dSock := localize("deploy/tierwall.yaml", ifD, "daemon")
	pCfg, pSock := localize("deploy/probe.yaml", ifP, "probe")
	for _, d := range []struct{ name, ns, cfg, sock string }{{"daemon", nsD, dCfg, dSock}, {"probe", nsP, pCfg, pSock}} {
		dm, err := harness.StartDaemon(harness.Options{Tierwall: tw, Netns: d.ns, Config: d.cfg, Socket: d.sock, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		name := d.name
		t.Cleanup(func() {
			dm.Stop()
			if t.Failed() {
				t.Logf("%s log:\n%s", name, dm.Output())
			}
		})
	}

	// The state the documents assume for direct use: a filter attached
	// (the man page's synopsis shows commands in no particular order).
	if out, err := exec.Command(tw, "-n", nsL, "attach", "-i", ifL).CombinedOutput(); err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	feed := filepath.Join(dir, "feed.txt")
	if err := os.WriteFile(feed, []byte("# documented feed\n203.0.113.9\n2001:db8:1::/48\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := docEnv{wire: wire, host: hst, nicNS: nsN, feed: feed, config: dCfg}
	daemonEnv, probeEnv, directEnv := base, base, base
	daemonEnv.netns, daemonEnv.iface = nsD, ifD
	probeEnv.netns, probeEnv.iface, probeEnv.socket, probeEnv.config = nsP, ifP, pSock, pCfg
	directEnv.netns, directEnv.iface = nsL, ifL
	nicEnv := directEnv
	nicEnv.netns = nsN

	run := func(c docCommand, e docEnv, name string, args ...string) {
		t.Helper()
		live := false
		if name == "tierwall" {
			live = indexOf(liveCommands, args[0]) >= 0 && indexOf(args, "--once") < 0
			args = append(pre(e), args...)
			name = tw
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Errorf("%s: %q: %v", c.where, c.text, err)
			return
		}
		if live {
			done := make(chan struct{})
			go func() {
				select {
				case <-time.After(2 * time.Second):
					_ = cmd.Process.Signal(syscall.SIGINT)
				case <-done:
				}
			}()
			defer close(done)
		}
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if live && ee.Sys().(syscall.WaitStatus).Signaled() && time.Since(start) >= 2*time.Second {
				code = 0 // stopped by our SIGINT while it still ran
			}
		} else if err != nil {
			t.Errorf("%s: %q: %v", c.where, c.text, err)
			return
		}
		out := stdout.String() + stderr.String()
		want := wantExit(c.comment)
		switch {
		case strings.Contains(out, "panic:") || strings.Contains(out, "goroutine "):
			t.Errorf("%s: %q: %s %s panicked:\n%s", c.where, c.text, name, strings.Join(args, " "), out)
		case !slices.Contains(want, code):
			t.Errorf("%s: %q: %s %s: exit %d, the document gives %v:\n%s", c.where, c.text, filepath.Base(name), strings.Join(args, " "), code, want, out)
		case regexp.MustCompile(`unknown (flag|shorthand|command)|deprecated`).MatchString(stderr.String()):
			t.Errorf("%s: %q: %s %s:\n%s", c.where, c.text, filepath.Base(name), strings.Join(args, " "), out)
		}
	}

	start := time.Now()
	ran := 0
	for _, c := range documentedCommands(t) {
		if c.inline {
			if strings.HasPrefix(c.text, "tierwall-lab ") {
				checkLab(t, lab, c, expand(shellWords(c.text)[1:]))
			}
			continue
		}
		words := shellWords(c.text)
		if len(words) == 0 {
			continue
		}
		if words[0] == "tierwall-lab" {
			checkLab(t, lab, c, expand(words[1:]))
			continue
		}
		if notRunReason(c.text) != "" || words[0] == "make" {
			continue
		}
		switch words[0] {
		case "ip":
			// The emulated NIC's bridge, in the namespace of its ports.
			for _, w := range expand(words) {
				run(c, nicEnv, "ip", append([]string{"-n", nsN}, nicEnv.substitute(w[1:])...)...)
				ran++
			}
		case "curl":
			args := append([]string{"-sS", "--fail-with-body"}, words[1:]...)
			for i, a := range args {
				if a == "/run/tierwall/api.sock" {
					args[i] = dSock
				}
			}
			run(c, daemonEnv, "curl", args...)
			ran++
		case "tierwall":
			for _, w := range expand(words[1:]) {
				if indexOf(w, "SUBCOMMAND") >= 0 {
					continue // a group named in the synopsis: its members are shown too
				}
				for _, e := range envsFor(w, daemonEnv, probeEnv, directEnv, nicEnv) {
					run(c, e, "tierwall", e.substitute(w)...)
					ran++
					if w[0] == "detach" {
						// What the next command assumes: the filter attached.
						run(c, e, "tierwall", "attach", "-i", e.iface)
					}
				}
			}
		}
	}
	if ran < 30 {
		t.Errorf("ran only %d documented commands", ran)
	}
	t.Logf("ran %d documented commands in %v", ran, time.Since(start).Round(time.Millisecond))
}

// pre is what run puts before a tierwall command's own words.
func pre(e docEnv) []string {
	p := []string{"-n", e.netns}
	if e.socket != "" {
		p = append(p, "--socket", e.socket)
	}
	return p
}

// envsFor is where a tierwall command runs: the probe's commands at the
// probe, the daemon's at the daemon, the emulated NIC's in its namespace,
// attach and detach in the namespace without a daemon, and the rule and
// counter commands, which work with and without a daemon, in both.
func envsFor(w []string, daemon, probe, direct, nic docEnv) []docEnv {
	switch w[0] {
	case "flows":
		return []docEnv{probe}
	case "nic":
		return []docEnv{nic}
	case "attach", "detach", "hw", "doctor", "version", "completion", "cleanup":
		return []docEnv{direct}
	case "block", "allow", "stats", "top":
		return []docEnv{direct, daemon}
	}
	return []docEnv{daemon}
}

// checkLab parses a tierwall-lab command against its own tree: with
// --help appended, cobra still refuses an unknown command or flag.
func checkLab(t *testing.T, lab string, c docCommand, lines [][]string) {
	t.Helper()
	for _, w := range lines {
		env := docEnv{netns: "twl-inet", iface: "eth9", feed: "feed.txt"}
		args := append(env.substitute(w), "--help")
		out, err := exec.Command(lab, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage:") || strings.Contains(string(out), "unknown") {
			t.Errorf("%s: %q: tierwall-lab %s: %v\n%s", c.where, c.text, strings.Join(args, " "), err, out)
		}
	}
}

func TestWantExit(t *testing.T) {
	for comment, want := range map[string][]int{
		"":                          {0},
		"rules with packets, bytes": {0},
		"exits 2":                   {2},
		"refused: exits with code 2, nothing changed":                  {2},
		"features, and every program's load; exit 1 if one is refused": {0, 1},
	} {
		if got := wantExit(comment); !slices.Equal(got, want) {
			t.Errorf("wantExit(%q) = %v, want %v", comment, got, want)
		}
	}
}

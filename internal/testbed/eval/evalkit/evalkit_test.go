// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
)

func TestFFAndLines(t *testing.T) {
	if got := FF(1.23456); got != "1.2346" {
		t.Errorf("FF = %q", got)
	}
	ls := Lines(map[string]plotter.XYs{"a": {{X: 1, Y: 2}}, "b": nil})
	slices.SortFunc(ls, func(x, y Line) int { return strings.Compare(x.Name, y.Name) })
	if len(ls) != 2 || ls[0].Name != "a" || len(ls[0].XYs) != 1 || ls[1].Name != "b" {
		t.Errorf("Lines = %+v", ls)
	}
}

func TestRandAddresses(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := netip.MustParsePrefix("198.18.32.0/20")
	for range 1000 {
		if a := RandIn(r, p); !p.Contains(a) {
			t.Fatalf("RandIn %v: %v", p, a)
		}
		// 20.0.0.1 to 199.255.255.254, never on 127/8 nor 198.18/15.
		a := RandSrc(r)
		if b := a.As4(); !a.Is4() || b[0] < 20 || b[0] >= 200 || b[3] == 0 || b[3] == 255 ||
			b[0] == 127 || netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
			t.Fatalf("RandSrc: %v", a)
		}
	}
}

// The loopback helpers read the kernel's view of a real socket.
func TestUDPSocketHelpers(t *testing.T) {
	ports, err := FreeUDPPorts(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 2 || ports[0] == ports[1] {
		t.Fatalf("FreeUDPPorts(2) = %v", ports)
	}
	if Listening(ports[0]) || UDPDrops(ports[0]) != ^uint64(0) {
		t.Fatalf("port %d: free, but said listening", ports[0])
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: Loopback.AsSlice(), Port: int(ports[0])})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !Listening(ports[0]) || UDPDrops(ports[0]) != 0 {
		t.Fatalf("port %d: bound, listening %v, drops %d", ports[0], Listening(ports[0]), UDPDrops(ports[0]))
	}
	s, err := net.DialUDP("udp", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for UDPQueued(ports[0]) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if UDPQueued(ports[0]) == 0 {
		t.Error("a datagram sent, none queued")
	}
	if _, err := exec.LookPath("ss"); err == nil && RcvBuf(ports[0]) <= 0 {
		t.Errorf("RcvBuf = %d", RcvBuf(ports[0]))
	}
}

func TestLoadAndCPU(t *testing.T) {
	for _, v := range LoadAvg() {
		if v < 0 {
			t.Errorf("LoadAvg: %v", LoadAvg())
		}
	}
	busy, total := CPUTimes(0)
	if total == 0 || busy > total {
		t.Errorf("CPUTimes(0) = %d, %d", busy, total)
	}
	m := MarkCPU(0)
	if p := m.BusyPct(); p < 0 || p > 100 {
		t.Errorf("BusyPct = %v", p)
	}
}

func TestProcKeepsOutput(t *testing.T) {
	var errs bytes.Buffer
	p, err := StartCmd(exec.Command("sh", "-c", "echo one; echo two; echo oops >&2; exec sleep 30"), "sh", &errs)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Lines()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop()
	if got := p.Lines(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("Lines = %q", got)
	}
	if !strings.Contains(errs.String(), "oops") {
		t.Errorf("standard error %q", errs.String())
	}
	if _, err := StartCmd(exec.CommandContext(context.Background(), "/nonexistent/tool"), "tool", &errs); err == nil || !strings.Contains(err.Error(), "starting tool") {
		t.Errorf("a missing binary: %v", err)
	}
}

func TestSh(t *testing.T) {
	if out, err := Sh("echo", "hi"); err != nil || out != "hi\n" {
		t.Errorf("Sh = %q, %v", out, err)
	}
	if _, err := Sh("sh", "-c", "echo bad >&2; exit 3"); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("a failing command: %v", err)
	}
	if err := ShIn("x", "grep", "-q", "x"); err != nil {
		t.Error(err)
	}
	if err := ShIn("y", "grep", "-q", "x"); err == nil {
		t.Error("ShIn: grep found what was not there")
	}
}

func TestChartSave(t *testing.T) {
	dir := t.TempDir()
	c := Chart{Title: "t", XLabel: "sources", YLabel: "Mpps", LogX: true, YMin: Zero(), YMax: Hundred(),
		Lines: []Line{{Name: "tierwall-host", XYs: plotter.XYs{{X: 1000, Y: 5}, {X: 128000, Y: 4}}},
			{Name: "paper", XYs: plotter.XYs{{X: 1000, Y: 3}}, Paper: true, Like: "tierwall-host"},
			{Name: "a cell", XYs: plotter.XYs{{X: 0, Y: 1}}}}} // X 0: not on a log axis
	if err := c.Save(dir, "fig"); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".png", ".svg"} {
		if st, err := os.Stat(filepath.Join(dir, "fig"+ext)); err != nil || st.Size() == 0 {
			t.Errorf("fig%s: %v", ext, err)
		}
	}
	// Nothing to draw: nothing written.
	if err := (Chart{Title: "empty", Lines: []Line{{Name: "x"}}}).Save(dir, "empty"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "empty.png")); err == nil {
		t.Error("an empty chart was drawn")
	}
}

// A series keeps its look in every figure and every run.
func TestLookIsStable(t *testing.T) {
	c1, g1, o1 := look("passive 64B 1000 flows")
	c2, g2, o2 := look("passive 64B 1000 flows")
	if c1 != c2 || g1 != g2 || o1 != o2 {
		t.Error("one name, two looks")
	}
	if _, _, o := look("xdp-filter"); o != Styles["xdp-filter"].Order {
		t.Errorf("xdp-filter's order %d", o)
	}
}

// WriteResults leaves the JSON and the document side by side, the JSON
// readable back into what was written.
func TestWriteResults(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "DOC.md")
	type res struct{ N int }
	if err := WriteResults(filepath.Join(dir, "eval"), "x.json", res{N: 7}, md, "# doc\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "eval", "x.json"))
	var got res
	if err != nil || json.Unmarshal(raw, &got) != nil || got.N != 7 {
		t.Errorf("x.json: %q %v", raw, err)
	}
	if b, err := os.ReadFile(md); err != nil || string(b) != "# doc\n" {
		t.Errorf("DOC.md: %q %v", b, err)
	}
	if err := WriteResults(filepath.Join(md, "sub"), "x.json", res{}, md, ""); err == nil {
		t.Error("a directory under a file: no error")
	}
}

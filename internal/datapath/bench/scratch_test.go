package bench

import (
	"os"
	"testing"
)

func TestScratchHeavy(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	r, err := BenchHeavy(1<<16, 7, 1<<20, 42)
	if err != nil {
		t.Fatal(err)
	}
	off, on, live := r.Median()
	t.Logf("off %.0f on %.0f live %.0f  on-off %+.0f live-off %+.0f  (off %v on %v live %v)", off, on, live, on-off, live-off, r.Off, r.On, r.Live)
}

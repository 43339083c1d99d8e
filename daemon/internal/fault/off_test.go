//go:build !egfault

package fault

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestDisabled(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled without the tag egfault")
	}
	if n := testing.AllocsPerRun(100, func() { Point(DashboardSampler) }); n != 0 {
		t.Errorf("Point allocates %v times per call", n)
	}
}

// TestNoTraceWithoutTag builds a program that calls Point with and without the tag: only
// the tagged binary holds the hook's strings, so a shipped image cannot inject.
func TestNoTraceWithoutTag(t *testing.T) {
	for _, c := range []struct {
		tags string
		hook bool
	}{{"", false}, {"egfault", true}} {
		bin := filepath.Join(t.TempDir(), "point")
		out, err := exec.Command("go", "build", "-tags", c.tags, "-o", bin, "./testdata/point").CombinedOutput()
		if err != nil {
			t.Fatalf("go build -tags %q: %v\n%s", c.tags, err, out)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte("egfault")); got != c.hook {
			t.Errorf("built with tags %q: the binary holds the hook: %v, want %v", c.tags, got, c.hook)
		}
	}
}

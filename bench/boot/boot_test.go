package boot

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKmsgMarker: the guest program prints the marker this package reads (it cannot import
// the package, see kmsg/main.go).
func TestKmsgMarker(t *testing.T) {
	src, err := os.ReadFile("kmsg/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := "const marker = " + strconv.Quote(KmsgMarker); !strings.Contains(string(src), want) {
		t.Errorf("kmsg/main.go has no %s", want)
	}
}

func TestKernelStart(t *testing.T) {
	out := []string{
		"EGBENCH-KMSG 1200 Linux version 6.1.0",
		"EGBENCH-KMSG 2500000 Run /init as init process",
		"some other line",
		"EGBENCH-KMSG 4250000 edgegate: EDGEGATE-READY",
	}
	at, ok := kernelStart(out, 6*time.Second)
	if !ok || at != 1750*time.Millisecond {
		t.Errorf("kernelStart = %v, %v; want 1.75s, true", at, ok)
	}
	if _, ok := kernelStart(out[:2], 6*time.Second); ok {
		t.Error("kernelStart found READY where the output has none")
	}
}

func TestInsertPhase(t *testing.T) {
	ps := insertPhase([]Phase{{"a", 1}, {"c", 3}}, Phase{"b", 2})
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "a,b,c" {
		t.Errorf("phases %s, want a,b,c", got)
	}
}

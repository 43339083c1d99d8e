package view

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestCacheRendersOncePerGeneration: the rules are read again only when the ruleset
// generation moved; a failed rendering is not kept; concurrent readers share one rendering.
func TestCacheRendersOncePerGeneration(t *testing.T) {
	gen, renders := uint32(7), 0
	var fail error
	c := &Cache{
		Generation: func() (uint32, error) { return gen, nil },
		Render: func(t *Text) error {
			renders++
			t.Printf("table ip edgegate # render %d\n", renders)
			return fail
		},
	}
	for range 3 {
		text, err := c.Text()
		if err != nil || !strings.Contains(text, "generation 7") || !strings.Contains(text, "render 1\n") {
			t.Fatalf("generation 7: %q %v, want the first rendering", text, err)
		}
	}
	gen = 8
	if text, err := c.Text(); err != nil || !strings.Contains(text, "generation 8") || !strings.Contains(text, "render 2\n") {
		t.Errorf("generation 8: %q %v, want a second rendering", text, err)
	}
	gen, fail = 9, errors.New("netlink: no buffer space")
	if _, err := c.Text(); err == nil {
		t.Error("a failed rendering returned no error")
	}
	fail = nil
	if text, err := c.Text(); err != nil || !strings.Contains(text, "render 4\n") {
		t.Errorf("after a failure: %q %v, want a fresh rendering", text, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = c.Text() })
	}
	wg.Wait()
	if renders != 4 {
		t.Errorf("%d renderings, want 4 (one per generation, one failed)", renders)
	}
	c.Generation = func() (uint32, error) { return 0, errors.New("no netlink") }
	if _, err := c.Text(); err == nil || !strings.Contains(err.Error(), "generation") {
		t.Errorf("unreadable generation: %v, want an error naming it", err)
	}
}

// TestTextCap: a rendering stops at its cap on a whole line, says that it was cut, and
// tells the renderer to stop reading.
func TestTextCap(t *testing.T) {
	x := NewText(100)
	lines := 0
	for !x.Full() {
		x.Printf("rule %03d counter accept;\n", lines) // 25 bytes
		lines++
	}
	s := x.String()
	kept, tail, _ := strings.Cut(s, "\n# cut")
	if len(kept) != 100 || strings.Count(kept, "\n") != 4 || !strings.Contains(tail, "100 bytes") {
		t.Errorf("capped text %q: want four whole lines and a note naming the cap", s)
	}
	if lines != 5 {
		t.Errorf("%d lines offered, want the renderer stopped at the first that did not fit", lines)
	}
	x.Printf("more\n")
	if x.String() != s {
		t.Error("a full text took more")
	}
	if small := NewText(0); small.limit != DefaultLimit || small.Full() || small.String() != "" {
		t.Errorf("default text: limit %d, full %v, %q", small.limit, small.Full(), small.String())
	}
}

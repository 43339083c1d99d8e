package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/internal/prereq"
)

// needTools: without the image tools (make deps-test installs them) t cannot run.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range Tools {
		_, err := LookTool(tool.Command)
		prereq.NoErr(t, err)
	}
}

// TestWrittenDirectoriesNeverGrow: the directories the updater and systemd-boot write are
// made large enough once, so that the entries an update adds and renames reuse deleted
// slots and never take a new cluster (a growing directory is two writes a power cut can
// tear apart).
func TestWrittenDirectoriesNeverGrow(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	staging := t.TempDir()
	for _, d := range writtenDirs {
		if err := os.MkdirAll(filepath.Join(staging, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "esp.img")
	p := Partition{FirstLBA: 2048, LastLBA: 2048 + MinESPSize/SectorSize - 1}
	if err := makeESP(ctx, file, p, staging); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Each name takes three directory entries (two long-name slots and the short one).
	addEntries := func(dir string, first, n int) {
		t.Helper()
		for i := first; i < first+n; i++ {
			if _, err := run(ctx, "mcopy", "-Q", "-i", file, empty, fmt.Sprintf("::/%s/edgegate-x%04d+2-1.conf", dir, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, dir := range writtenDirs {
		before := freeBytes(t, file)
		addEntries(dir, 0, (presizeSlots-2)/3) // "." and ".." take two
		if after := freeBytes(t, file); after != before {
			t.Errorf("%s grew by %d bytes for %d entries", dir, before-after, presizeSlots-2)
		}
	}
	// The measure sees growth: a few dozen more names do not fit.
	before := freeBytes(t, file)
	for i := range 40 {
		addEntries(layout.EntriesDir, 1000+i, 1)
		if freeBytes(t, file) < before {
			return
		}
	}
	t.Errorf("%s took 40 more names without growing: the free space does not show growth", layout.EntriesDir)
}

var freeRE = regexp.MustCompile(`([0-9 ]+) bytes free`)

// freeBytes is the FAT file system's free space as mdir counts it.
func freeBytes(t *testing.T, file string) int64 {
	t.Helper()
	out, err := run(context.Background(), "mdir", "-i", file, "::/")
	if err != nil {
		t.Fatal(err)
	}
	m := freeRE.FindSubmatch(out)
	if m == nil {
		t.Fatal(errors.New("mdir printed no free space: " + string(out)))
	}
	n, err := strconv.ParseInt(string(regexp.MustCompile(`\s`).ReplaceAll(m[1], nil)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

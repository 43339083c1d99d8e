package nbddisk_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegate/edgegate/qemu/nbddisk"
)

// TestReplayRebuildsACutFromTheTrace: a recording disk's trace rebuilds, from a copy of the
// image it started from, the disk a cut before any flush would have left, without running
// the client again; replayed to the end it is the disk the client left.
func TestReplayRebuildsACutFromTheTrace(t *testing.T) {
	requireQEMUUtils(t)
	dir := t.TempDir()
	base, live := filepath.Join(dir, "base.img"), filepath.Join(dir, "live.img")
	for _, p := range []string{base, live} {
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := nbddisk.Start(live, nbddisk.Options{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	qemuIO(t, d, "write -P 0x11 0 4k", "flush", "write -P 0x22 4k 4k", "write -f -P 0x33 8k 4k", "write -P 0x44 12k 4k", "flush", "write -P 0x55 16k 4k")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ops := d.Trace()
	flushes := nbddisk.FlushPoints(ops)
	if len(flushes) < 2 {
		t.Fatalf("trace %d ops with flushes at %v, want the two the client asked for", len(ops), flushes)
	}
	replay := func(cut int, policy nbddisk.Policy) []byte {
		t.Helper()
		img := filepath.Join(t.TempDir(), "replay.img")
		b, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(img, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := nbddisk.Replay(img, ops, cut, policy)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cut at op %d: %v", cut, r)
		out, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		return out[:5*4096]
	}
	sector := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }
	// Cut before the second flush: the first flush's write and the FUA write are there.
	want := bytes.Join([][]byte{sector(0x11), sector(0), sector(0x33), sector(0), sector(0)}, nil)
	if got := replay(flushes[1], nbddisk.KeepNone); !bytes.Equal(got, want) {
		t.Error("a cut before the second flush, keeping nothing pending: want the flushed and the FUA write only")
	}
	want = bytes.Join([][]byte{sector(0x11), sector(0x22), sector(0x33), sector(0x44), sector(0)}, nil)
	if got := replay(flushes[1], nbddisk.KeepAll); !bytes.Equal(got, want) {
		t.Error("a cut before the second flush, keeping everything pending: want the four writes")
	}
	final, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if got := replay(len(ops), nbddisk.KeepNone); !bytes.Equal(got, final[:5*4096]) {
		t.Error("the whole trace replayed is not what the client left")
	}
}

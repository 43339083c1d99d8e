package nbddisk_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/internal/prereq"
	"github.com/edgegate/edgegate/qemu"
	"github.com/edgegate/edgegate/qemu/nbddisk"
)

// These tests drive the disk with QEMU's own NBD client (qemu-io and qemu-img from
// Debian's qemu-utils), the client the guests' disks use.

// waitLimit bounds every wait on a QEMU tool or on the disk.
const waitLimit = 30 * time.Second

func requireQEMUUtils(t *testing.T) {
	t.Helper()
	err := qemu.InstallTools(context.Background(),
		image.Tool{Command: "qemu-io", Package: "qemu-utils"}, image.Tool{Command: "qemu-img", Package: "qemu-utils"})
	prereq.NoErr(t, err)
}

// startDisk serves a zeroed image of size bytes; it returns the disk and the image's path.
func startDisk(t *testing.T, size int) (*nbddisk.Disk, string) {
	t.Helper()
	requireQEMUUtils(t)
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := nbddisk.Start(path, nbddisk.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d, path
}

func uri(d *nbddisk.Disk) string { return "nbd+unix:///?socket=" + d.Socket() }

// qemuIO runs qemu-io on the disk with a write-back cache (writes without FUA, flushes
// only when told) and waits for it to end.
func qemuIO(t *testing.T, d *nbddisk.Disk, commands ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qemu-io", qemuIOArgs(d, commands)...).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("failed")) {
		t.Fatalf("qemu-io %q: %v\n%s", commands, err, out)
	}
	return string(out)
}

func qemuIOArgs(d *nbddisk.Disk, commands []string) []string {
	args := []string{"-t", "writeback", "-f", "raw", uri(d)}
	for _, c := range commands {
		args = append(args, "-c", c)
	}
	return args
}

// liveQEMUIO runs qemu-io's commands and then keeps it connected, as a guest is until its
// power goes: closing qemu-io would flush. It returns the output's lines as they come;
// the process is killed when the test ends.
func liveQEMUIO(t *testing.T, d *nbddisk.Disk, commands ...string) <-chan string {
	t.Helper()
	// The sleep only keeps the client connected. stdbuf makes qemu-io's stdio write each
	// line as it comes, not when it exits.
	cmd := exec.Command("stdbuf", append([]string{"-oL", "qemu-io"}, qemuIOArgs(d, append(commands, "sleep 600000"))...)...)
	cmd.Stderr = cmd.Stdout
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return lines
}

// expectLine waits for a line of qemu-io's holding want; a failed command fails the test.
func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(waitLimit)
	for {
		select {
		case l, ok := <-lines:
			switch {
			case !ok:
				t.Fatalf("qemu-io ended before %q", want)
			case strings.Contains(l, "failed") || strings.Contains(l, "error"):
				t.Fatalf("qemu-io: %s", l)
			case strings.Contains(l, want):
				return
			}
		case <-timeout:
			t.Fatalf("qemu-io: no %q within %v", want, waitLimit)
		}
	}
}

func fileBytes(t *testing.T, path string, off, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[off : off+n]
}

func TestQEMUClientWritesAreLostOrKeptOrTornAtACut(t *testing.T) {
	const size = 64 << 10
	for _, tc := range []struct {
		name   string
		policy nbddisk.Policy
		kept   int // leading bytes of the write that reach the file
	}{
		{"keep none", nbddisk.KeepNone, 0},
		{"keep all", nbddisk.KeepAll, size},
		{"torn after 10 sectors", func(p []nbddisk.PendingWrite) []nbddisk.Keep {
			return []nbddisk.Keep{{Write: 0, Sectors: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}}
		}, 10 * nbddisk.SectorSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, path := startDisk(t, 1<<20)
			lines := liveQEMUIO(t, d, "write -P 0xab 0 64k", "read -P 0xab 0 64k")
			expectLine(t, lines, "read 65536/65536 bytes at offset 0") // the cache, read back
			st := d.Stats()
			if st.Writes != 1 || st.FUAWrites != 0 || st.PendingWrites != 1 || st.PendingBytes != size {
				t.Fatalf("stats %+v, want one pending 64 KiB write without FUA", st)
			}
			if !bytes.Equal(fileBytes(t, path, 0, size), make([]byte, size)) {
				t.Fatal("an unflushed write reached the file")
			}
			r, err := d.Cut(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r)
			want := append(bytes.Repeat([]byte{0xab}, tc.kept), make([]byte, size-tc.kept)...)
			if !bytes.Equal(fileBytes(t, path, 0, size), want) {
				t.Errorf("the file after the cut does not hold the write's first %d bytes only", tc.kept)
			}
			if err := d.PowerOn(); err != nil {
				t.Fatal(err)
			}
			// After power-on QEMU reads what the file holds.
			var reads []string
			if tc.kept > 0 {
				reads = append(reads, fmt.Sprintf("read -P 0xab 0 %d", tc.kept))
			}
			if tc.kept < size {
				reads = append(reads, fmt.Sprintf("read -P 0 %d %d", tc.kept, size-tc.kept))
			}
			qemuIO(t, d, reads...)
		})
	}
}

func TestQEMUClientFlushAndFUAWritesSurviveACut(t *testing.T) {
	d, path := startDisk(t, 1<<20)
	liveQEMUIO(t, d, "write -P 0x11 0 4k", "flush", "write -f -P 0x22 4k 4k", "write -P 0x33 8k 4k")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// The cut comes right after the third write, before QEMU hears back about it.
	r, err := d.CutWhen(ctx, func(s nbddisk.Stats) bool { return s.Writes == 3 }, nbddisk.KeepNone)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if len(r.Outcomes) != 1 || r.Outcomes[0].Write.Seq != 3 || r.Outcomes[0].Fate != nbddisk.Lost {
		t.Errorf("want only the third write pending and lost:\n%v", r)
	}
	want := bytes.Join([][]byte{bytes.Repeat([]byte{0x11}, 4096), bytes.Repeat([]byte{0x22}, 4096), make([]byte, 4096)}, nil)
	if !bytes.Equal(fileBytes(t, path, 0, 3*4096), want) {
		t.Error("after the cut the file should hold the flushed write and the FUA write, and not the last one")
	}
	if st := d.Stats(); st.Flushes != 1 || st.FUAWrites != 1 || st.Connections != 0 || st.PendingWrites != 0 {
		t.Errorf("stats after the cut %+v, want 1 flush, 1 FUA write, no connection and nothing pending left", st)
	}
}

func TestQEMUImgCopiesThroughTheCache(t *testing.T) {
	const size = 4 << 20
	d, path := startDisk(t, size)
	src := filepath.Join(t.TempDir(), "src.img")
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, args := range [][]string{
		{"qemu-img", "info", uri(d)},
		{"qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, uri(d)},
		{"qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri(d)},
	} {
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		t.Logf("%s: %s", args[1], bytes.TrimSpace(out))
	}
	st := d.Stats()
	t.Logf("stats after the copy: %+v", st)
	if _, err := d.Cut(nbddisk.KeepAll); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the file after a cut that keeps all differs from the source (%v)", err)
	}
}

// TestQEMUSystemAttachesTheDiskWithItsWriteCacheOn boots nothing: it starts each qemu
// board's emulator paused (-S) with the disk arguments qemu.Args gives an NBD disk, and
// writes and flushes through the guest device's own block backend from the monitor, as
// the guest's driver would. The writes must come without FUA (the device's write cache is
// on) and the flush as an NBD flush.
func TestQEMUSystemAttachesTheDiskWithItsWriteCacheOn(t *testing.T) {
	for _, name := range []string{"qemu-x86_64", "qemu-arm64"} {
		t.Run(name, func(t *testing.T) {
			b, err := board.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			prereq.NoErr(t, qemu.Install(context.Background(), b))
			d, path := startDisk(t, 1<<20)
			all, err := qemu.Args(qemu.Options{Board: b, Kernel: "k", Initramfs: "i", Disks: []qemu.Disk{{NBD: d.Socket()}}})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(all, "-blockdev")
			if i < 0 || len(all) < i+4 || all[i+2] != "-device" {
				t.Fatalf("no -blockdev and -device in %q", all)
			}
			args := append([]string{"-M", b.QEMU.Machine, "-accel", "tcg", "-S", "-display", "none", "-nodefaults", "-qmp", "stdio"}, all[i:i+4]...)
			// The disk's device is the only -device: QOM names it device[0].
			hmp := func(cmd string) string {
				return `{"execute":"human-monitor-command","arguments":{"command-line":` + strconv.Quote(cmd) + "}}\n"
			}
			dev := "/machine/peripheral-anon/device[0]/virtio-backend"
			qmp := `{"execute":"qmp_capabilities"}` + "\n" + `{"execute":"query-block"}` + "\n" +
				hmp(`qemu-io -d `+dev+` "write -P 0xaa 0 4k"`) + hmp(`qemu-io -d `+dev+` "flush"`) +
				hmp(`qemu-io -d `+dev+` "write -P 0xbb 4k 4k"`)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cmd := exec.CommandContext(ctx, b.QEMU.Binary, args...)
			cmd.Stdin = strings.NewReader(qmp)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			// The power goes with the write after the flush pending; then QEMU is killed,
			// as a quit would flush.
			r, err := d.CutWhen(ctx, func(s nbddisk.Stats) bool { return s.Writes == 2 }, nbddisk.KeepNone)
			if err != nil {
				t.Fatal(err)
			}
			cmd.Process.Kill()
			out, _ := io.ReadAll(stdout)
			if !strings.Contains(string(out), `"writeback": true`) {
				t.Errorf("query-block does not show a write-back cache:\n%s", out)
			}
			st := d.Stats()
			t.Logf("stats at the cut: %+v\n%v", st, r)
			if st.FUAWrites != 0 || st.Flushes < 1 || r.Count(nbddisk.Lost) != 1 {
				t.Errorf("stats %+v: want the writes without FUA and the flush passed through", st)
			}
			want := append(bytes.Repeat([]byte{0xaa}, 4096), make([]byte, 4096)...)
			if !bytes.Equal(fileBytes(t, path, 0, 8192), want) {
				t.Error("the file should hold the flushed write, not the one after the flush")
			}
		})
	}
}

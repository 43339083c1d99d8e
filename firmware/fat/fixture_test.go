package fat_test

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/internal/prereq"
)

// toolbox is Debian's tools the tests make, fill, read and check FAT32 images with.
type toolbox map[string]string

// needTools finds dosfstools and mtools; without them the test cannot run (prereq.Missing).
func needTools(t testing.TB) toolbox {
	t.Helper()
	tb := toolbox{}
	for _, name := range []string{"mkfs.vfat", "fsck.fat", "mcopy", "mmd", "mdel", "mren", "mshowfat"} {
		p, err := image.LookTool(name)
		if err != nil {
			prereq.Missing(t, "%s not found: install Debian's dosfstools and mtools (make deps-test)", name)
		}
		tb[name] = p
	}
	return tb
}

// run runs a tool; mtools is told not to hold an image file to a floppy's geometry.
func (tb toolbox) run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := tb.try(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (tb toolbox) try(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(tb[name], args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1", "SOURCE_DATE_EPOCH=1700000000")
	return cmd.CombinedOutput()
}

// fsckClean runs fsck.fat -n, which only reads, and fails the test on any complaint.
func (tb toolbox) fsckClean(t testing.TB, img string) {
	t.Helper()
	out, err := tb.try("fsck.fat", "-n", img)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "fsck.fat ") || !strings.Contains(lines[1], " files, ") {
		t.Fatalf("fsck.fat -n %s: %v\n%s", img, err, out)
	}
}

// readTree reads every file of an image back with mcopy: path (from the root) to content.
func (tb toolbox) readTree(t testing.TB, img string) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	tb.run(t, "mcopy", "-s", "-n", "-i", img, "::*", dir)
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		files["/"+filepath.ToSlash(strings.TrimPrefix(p, dir+"/"))] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var rangeRE = regexp.MustCompile(`<(\d+)(?:-(\d+))?>`)

// chain is a file's or directory's clusters as mshowfat prints them.
func (tb toolbox) chain(t testing.TB, img, p string) []uint32 {
	t.Helper()
	return parseChain(t, string(tb.run(t, "mshowfat", "-i", img, "::"+p)))
}

func parseChain(t testing.TB, line string) []uint32 {
	var c []uint32
	for _, m := range rangeRE.FindAllStringSubmatch(line, -1) {
		lo, _ := strconv.Atoi(m[1])
		hi := lo
		if m[2] != "" {
			hi, _ = strconv.Atoi(m[2])
		}
		for x := lo; x <= hi; x++ {
			c = append(c, uint32(x))
		}
	}
	return c
}

// fixture is an ESP-like image built once, the files in it, and the older versions its
// metadata sectors had while it was built (for replaying lost writes).
type fixture struct {
	image []byte
	// chunks are the offsets of the image's 64 KiB chunks that are not all zeros.
	chunks []int
	files  map[string][]byte
	// meta lists the sectors of both FATs and of every directory; history holds, per
	// sector, the versions it had before its final one.
	meta    []int64
	history map[int64][][]byte
}

var dirs = []string{
	"/EFI", "/EFI/BOOT", "/EFI/edgegate", "/EFI/edgegate/a", "/loader", "/loader/entries",
	"/EDGEGATE", "/EDGEGATE/A", "/EDGEGATE/B",
}

// steps build the image the way an ESP is written: files appear one by one, a boot
// entry is written under a temporary name and renamed, a file is deleted.
var steps = []struct {
	op   string // "copy", "rename" (to arg), "delete"
	path string
	size int
	arg  string
}{
	{"copy", "/EFI/BOOT/old.efi", 700, ""},
	{"copy", "/EFI/BOOT/BOOTX64.EFI", 96 << 10, ""},
	{"delete", "/EFI/BOOT/old.efi", 0, ""},
	{"copy", "/loader/loader.conf", 30, ""},
	{"copy", "/EFI/edgegate/a/empty", 0, ""},
	{"copy", "/EFI/edgegate/a/one", 1, ""},
	{"copy", "/EFI/edgegate/a/s512", 512, ""},
	{"copy", "/EFI/edgegate/a/s513", 513, ""},
	{"copy", "/EDGEGATE/A/vmlinuz", 1<<20 + 300, ""},
	{"copy", "/EDGEGATE/A/initramfs.cpio.gz", 2 << 20, ""},
	{"copy", "/loader/entries/.tmp-edgegate-a.conf-777", 180, ""},
	{"rename", "/loader/entries/.tmp-edgegate-a.conf-777", 0, "edgegate-a.conf"},
	{"copy", "/loader/entries/edgegate-b+2-1.conf", 190, ""},
	{"copy", "/loader/entries/.tmp-edgegate-b+3.conf-12345", 200, ""},
	{"copy", "/loader/entries/edgegate-b+3.conf", 170, ""},
	{"copy", "/EDGEGATE/B/initramfs.cpio.gz", 768 << 10, ""},
	{"copy", "/EDGEGATE/B/initramfs.cpio.gz.new", 512<<10 + 37, ""},
}

// imageChunk is the granularity of writing an image sparse.
const imageChunk = 64 << 10

var (
	fixtureMu sync.Mutex
	built     = map[int]*fixture{}
)

// esp returns the fixture: a 64 MiB FAT32 volume with 512-byte clusters like the real
// ESP's (192 MiB), built on first use.
func esp(t testing.TB) *fixture { return cachedFixture(t, 64<<10, 1) }

// smallESP is the same volume at 36 MiB, the smallest with 512-byte clusters that mtools
// still takes for FAT32 (65525 clusters), with files an eighth as large, for the tests
// that repair it hundreds of times.
func smallESP(t testing.TB) *fixture { return cachedFixture(t, 36<<10, 8) }

func cachedFixture(t testing.TB, kib, scale int) *fixture {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if built[kib] == nil {
		built[kib] = buildFixture(t, kib, scale)
	}
	return built[kib]
}

// buildFixture makes a FAT32 volume of kib KiB and writes the steps to it, dividing the
// sizes of files over 64 KiB by scale.
func buildFixture(t testing.TB, kib, scale int) *fixture {
	tb := needTools(t)
	work := t.TempDir()
	img := filepath.Join(work, "esp.img")
	tb.run(t, "mkfs.vfat", "-F", "32", "-S", "512", "-s", "1", "-n", "ESP", "-i", "0ed6e6a7", "-C", img, strconv.Itoa(kib))
	args := []string{"-i", img}
	for _, d := range dirs {
		args = append(args, "::"+d)
	}
	tb.run(t, "mmd", args...)
	fx := &fixture{files: map[string][]byte{}, history: map[int64][][]byte{}}
	rng := rand.NewChaCha8([32]byte{'e', 's', 'p'})
	snap := fx.snapshotter(t, tb, img)
	for _, s := range steps {
		switch s.op {
		case "copy":
			size := s.size
			if size > 64<<10 {
				size /= scale
			}
			b := make([]byte, size)
			rng.Read(b)
			src := filepath.Join(work, "src")
			if err := os.WriteFile(src, b, 0o644); err != nil {
				t.Fatal(err)
			}
			tb.run(t, "mcopy", "-i", img, src, "::"+s.path)
			fx.files[s.path] = b
		case "rename":
			tb.run(t, "mren", "-i", img, "::"+s.path, s.arg)
			to := path.Join(path.Dir(s.path), s.arg)
			fx.files[to] = fx.files[s.path]
			delete(fx.files, s.path)
		case "delete":
			tb.run(t, "mdel", "-i", img, "::"+s.path)
			delete(fx.files, s.path)
		}
		snap()
	}
	var err error
	if fx.image, err = os.ReadFile(img); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, imageChunk)
	for off := 0; off < len(fx.image); off += imageChunk {
		if !bytes.Equal(fx.image[off:off+imageChunk], zero) {
			fx.chunks = append(fx.chunks, off)
		}
	}
	for s := range fx.history {
		fx.meta = append(fx.meta, s)
	}
	slices.Sort(fx.meta)
	// The last snapshot is the image itself: history keeps only older versions.
	for s, vs := range fx.history {
		if bytes.Equal(vs[len(vs)-1], fx.image[s*sector:(s+1)*sector]) {
			fx.history[s] = vs[:len(vs)-1]
		}
	}
	return fx
}

// snapshotter returns a function that records the current version of every FAT sector
// in use and every directory sector.
func (fx *fixture) snapshotter(t testing.TB, tb toolbox, img string) func() {
	return func() {
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		g := readGeometry(t, f)
		var sectors []int64
		for k := int64(0); k < g.numFATs; k++ {
			for s := int64(0); s < 128; s++ { // 16384 clusters: more than the files use
				sectors = append(sectors, g.fatStart/sector+k*g.fatSize/sector+s)
			}
		}
		args := []string{"-i", img, "::/"}
		for _, d := range dirs {
			args = append(args, "::"+d)
		}
		for _, cl := range parseChain(t, string(tb.run(t, "mshowfat", args...))) {
			sectors = append(sectors, g.clusterOffset(cl)/sector)
		}
		for _, s := range sectors {
			b := make([]byte, sector)
			if _, err := f.ReadAt(b, s*sector); err != nil {
				t.Fatal(err)
			}
			vs := fx.history[s]
			if len(vs) == 0 || !bytes.Equal(vs[len(vs)-1], b) {
				fx.history[s] = append(vs, b)
			}
		}
	}
}

// geometry is what the tests need of a boot sector, read here independently of the
// package under test.
type geometry struct {
	fatStart, fatSize, numFATs, dataStart, clusterSize int64
	fsInfo                                             int64
}

func readGeometry(t testing.TB, f interface {
	ReadAt([]byte, int64) (int, error)
}) geometry {
	t.Helper()
	b := make([]byte, sector)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	ss := int64(binary.LittleEndian.Uint16(b[11:]))
	g := geometry{
		fatStart:    int64(binary.LittleEndian.Uint16(b[14:])) * ss,
		fatSize:     int64(binary.LittleEndian.Uint32(b[36:])) * ss,
		numFATs:     int64(b[16]),
		clusterSize: int64(b[13]) * ss,
		fsInfo:      int64(binary.LittleEndian.Uint16(b[48:])) * ss,
	}
	g.dataStart = g.fatStart + g.numFATs*g.fatSize
	return g
}

func (g geometry) clusterOffset(cl uint32) int64 { return g.dataStart + int64(cl-2)*g.clusterSize }

// fatOffset is the byte offset of cluster cl's entry in FAT copy k (0 is FAT 1).
func (g geometry) fatOffset(k int64, cl uint32) int64 {
	return g.fatStart + k*g.fatSize + 4*int64(cl)
}

package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// The test parts are small and not multiples of the tar block size, so that every entry has
// padding after it.
var (
	testKernel    = bytes.Repeat([]byte("kernel-image "), 97)   // 1261 bytes
	testInitramfs = bytes.Repeat([]byte("initramfs-cpio "), 45) // 675 bytes
	testTime      = time.Date(2025, 11, 23, 9, 41, 0, 0, time.UTC)
)

func testKey(seed byte) PrivateKey {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return PrivateKey{ID: KeyID(priv.Public().(ed25519.PublicKey)), Key: priv}
}

func testRelease() Release {
	return Release{Board: "qemu-x86_64", Version: "v0.4.0-12-gabc1234", BuildTime: testTime}
}

func testPolicy() Policy {
	return Policy{Board: "qemu-x86_64", Keys: []PublicKey{testKey(2).Public(), testKey(1).Public()}, Running: "v0.4.0"}
}

func makeBundle(t testing.TB, rel Release, key PrivateKey) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Create(&buf, rel, bytes.NewReader(testKernel), bytes.NewReader(testInitramfs), key); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return buf.Bytes()
}

// readBundle does what a gateway does: Open, then both parts, stopping at the first error.
func readBundle(r io.Reader, p Policy) (m Manifest, kernel, initramfs []byte, err error) {
	b, err := Open(r, p)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	var k, i bytes.Buffer
	if _, err := b.CopyKernel(&k); err != nil {
		return Manifest{}, nil, nil, err
	}
	if _, err := b.CopyInitramfs(&i); err != nil {
		return Manifest{}, nil, nil, err
	}
	return b.Manifest(), k.Bytes(), i.Bytes(), nil
}

func TestRoundTrip(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if got := strings.Join(names, " "); got != "manifest.json manifest.sig kernel initramfs" {
		t.Errorf("entries: %s", got)
	}

	m, k, i, err := readBundle(bytes.NewReader(data), testPolicy())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(k, testKernel) || !bytes.Equal(i, testInitramfs) {
		t.Errorf("parts differ: kernel %d bytes, initramfs %d bytes", len(k), len(i))
	}
	want := Manifest{
		Format: 1, Board: "qemu-x86_64", Version: "v0.4.0-12-gabc1234", BuildTime: testTime, KeyID: testKey(1).ID,
		Kernel:    Part{Size: int64(len(testKernel)), SHA256: sha(testKernel)},
		Initramfs: Part{Size: int64(len(testInitramfs)), SHA256: sha(testInitramfs)},
	}
	if !m.BuildTime.Equal(want.BuildTime) {
		t.Errorf("buildTime %v, want %v", m.BuildTime, want.BuildTime)
	}
	m.BuildTime = want.BuildTime
	if m != want {
		t.Errorf("manifest %+v, want %+v", m, want)
	}
	if !bytes.Equal(data, makeBundle(t, testRelease(), testKey(1))) {
		t.Error("the same inputs made a different bundle")
	}
}

func TestRawManifest(t *testing.T) {
	b, err := Open(bytes.NewReader(makeBundle(t, testRelease(), testKey(1))), testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	raw := b.RawManifest()
	for _, want := range []string{`"board": "qemu-x86_64"`, `"buildTime": "2025-11-23T09:41:00Z"`, `"keyID": "` + testKey(1).ID + `"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("manifest.json lacks %s:\n%s", want, raw)
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// refusal checks err wraps want and its message names every one of names.
func refusal(t *testing.T, err, want error, names ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %q", err, n)
		}
	}
}

func TestPolicyRefusals(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	for _, tc := range []struct {
		name   string
		policy func(*Policy)
		want   error
		names  []string
	}{
		{"unknown key", func(p *Policy) { p.Keys = []PublicKey{testKey(3).Public()} }, ErrUnknownKey,
			[]string{testKey(1).ID, testKey(3).ID}},
		{"wrong board", func(p *Policy) { p.Board = "qemu-arm64" }, ErrWrongBoard,
			[]string{"bundle is for board qemu-x86_64, this gateway is qemu-arm64"}},
		{"older", func(p *Policy) { p.Running = "v0.5.0" }, ErrNotNewer, []string{"v0.4.0-12-gabc1234", "v0.5.0", "older"}},
		{"same", func(p *Policy) { p.Running = "v0.4.0-12-gabc1234" }, ErrNotNewer, []string{"v0.4.0-12-gabc1234", "running version"}},
		{"same commit count, other hash", func(p *Policy) { p.Running = "v0.4.0-12-gfff0000-dirty" }, ErrNotNewer,
			[]string{"v0.4.0-12-gfff0000-dirty"}},
		{"running unparseable", func(p *Policy) { p.Running = "dev" }, ErrMalformed, []string{`"dev"`, "running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			tc.policy(&p)
			_, _, _, err := readBundle(bytes.NewReader(data), p)
			refusal(t, err, tc.want, tc.names...)
		})
	}
}

func TestForce(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	for _, running := range []string{"v0.5.0", "v0.4.0-12-gabc1234", "dev", ""} {
		p := testPolicy()
		p.Running, p.Force = running, true
		if _, _, _, err := readBundle(bytes.NewReader(data), p); err != nil {
			t.Errorf("running %q with Force: %v", running, err)
		}
	}
	// Force is about the version only.
	p := testPolicy()
	p.Board, p.Force = "qemu-arm64", true
	_, _, _, err := readBundle(bytes.NewReader(data), p)
	refusal(t, err, ErrWrongBoard)
	p = testPolicy()
	p.Keys, p.Force = []PublicKey{testKey(3).Public()}, true
	_, _, _, err = readBundle(bytes.NewReader(data), p)
	refusal(t, err, ErrUnknownKey)
}

func TestPolicyInvalid(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	for _, p := range []Policy{{Keys: testPolicy().Keys}, {Board: "qemu-x86_64"}} {
		if _, err := Open(bytes.NewReader(data), p); err == nil || !strings.Contains(err.Error(), "policy") {
			t.Errorf("Open with %+v: %v, want a policy error", p, err)
		}
	}
}

// layout is where each entry's header and data start in a bundle Create wrote.
type layout struct{ header, data, end, next int }

func entries(t *testing.T, data []byte) []layout {
	t.Helper()
	var out []layout
	off := 0
	for range 4 {
		hdr, err := tar.NewReader(bytes.NewReader(data[off:])).Next()
		if err != nil {
			t.Fatal(err)
		}
		size := int(hdr.Size)
		out = append(out, layout{off, off + 512, off + 512 + size, off + 512 + (size+511)/512*512})
		off = out[len(out)-1].next
	}
	return out
}

func TestFlippedBytes(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	l := entries(t, data)
	for _, tc := range []struct {
		entry int
		want  []error // any of these
	}{
		{0, []error{ErrBadSignature, ErrMalformed, ErrUnknownKey}},
		{1, []error{ErrBadSignature}},
		{2, []error{ErrBadDigest}},
		{3, []error{ErrBadDigest}},
	} {
		for off := l[tc.entry].data; off < l[tc.entry].end; off++ {
			bad := bytes.Clone(data)
			bad[off] ^= 0x01
			_, _, _, err := readBundle(bytes.NewReader(bad), testPolicy())
			ok := false
			for _, w := range tc.want {
				ok = ok || errors.Is(err, w)
			}
			if !ok {
				t.Fatalf("byte %d of entry %d flipped: error %v, want one of %v", off-l[tc.entry].data, tc.entry, err, tc.want)
			}
		}
	}
	// One flip per entry, checked for its message.
	flip := func(off int) error {
		bad := bytes.Clone(data)
		bad[off] ^= 0x01
		_, _, _, err := readBundle(bytes.NewReader(bad), testPolicy())
		return err
	}
	refusal(t, flip(bytes.Index(data, []byte("qemu-x86_64"))), ErrBadSignature, "manifest.sig", testKey(1).ID)
	refusal(t, flip(l[1].data+10), ErrBadSignature, "manifest.sig")
	refusal(t, flip(l[2].data+100), ErrBadDigest, "kernel: sha256", sha(testKernel))
	refusal(t, flip(l[3].end-1), ErrBadDigest, "initramfs: sha256", sha(testInitramfs))
}

func TestTruncated(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	for n := 0; n < len(data); n++ {
		_, _, _, err := readBundle(bytes.NewReader(data[:n]), testPolicy())
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("bundle cut at %d of %d bytes: %v, want ErrMalformed", n, len(data), err)
		}
	}
	l := entries(t, data)
	for _, tc := range []struct {
		cut  int
		want string
	}{
		{l[1].header, "archive ends where manifest.sig should be"},
		{l[2].header, "archive ends where kernel should be"},
		{l[2].data + 7, "kernel: after 7 of 1261 bytes"},
		{l[3].header, "archive ends where initramfs should be"},
		{l[3].end, "end-of-archive marker (0 of 1024 bytes)"},
		{l[3].next + 512, "end-of-archive marker (512 of 1024 bytes)"},
	} {
		_, _, _, err := readBundle(bytes.NewReader(data[:tc.cut]), testPolicy())
		refusal(t, err, ErrMalformed, tc.want)
	}
}

func TestTrailer(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	// GNU tar pads the archive to a 10 KiB record; that is accepted, more or non-zero is not.
	padded := append(bytes.Clone(data), make([]byte, 10240-len(data)%10240)...)
	if _, _, _, err := readBundle(bytes.NewReader(padded), testPolicy()); err != nil {
		t.Errorf("bundle padded to %d bytes: %v", len(padded), err)
	}
	for _, tail := range [][]byte{[]byte("x"), make([]byte, 10240)} {
		_, _, _, err := readBundle(bytes.NewReader(append(bytes.Clone(data), tail...)), testPolicy())
		refusal(t, err, ErrMalformed, "after the end-of-archive marker")
	}
}

type entry struct {
	name     string
	typeflag byte
	data     []byte
	size     int64 // header size when it differs from len(data)
}

func writeTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		size := int64(len(e.data))
		if e.size != 0 {
			size = e.size
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.typeflag, Size: size, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil && e.size == 0 {
			t.Fatal(err)
		}
	}
	// An entry written short (a huge declared size) is left as it is: the header is what
	// such a test is about, and Flush would refuse it.
	if es == nil || es[len(es)-1].size == 0 {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// signed returns manifest.json and its signature for m, however wrong m is.
func signed(t *testing.T, m Manifest, key PrivateKey) (raw, sig []byte) {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw, ed25519.Sign(key.Key, raw)
}

func goodManifest() Manifest {
	return Manifest{
		Format: 1, Board: "qemu-x86_64", Version: "v0.4.1", BuildTime: testTime, KeyID: testKey(1).ID,
		Kernel:    Part{Size: int64(len(testKernel)), SHA256: sha(testKernel)},
		Initramfs: Part{Size: int64(len(testInitramfs)), SHA256: sha(testInitramfs)},
	}
}

func TestEntries(t *testing.T) {
	raw, sig := signed(t, goodManifest(), testKey(1))
	man := entry{name: "manifest.json", typeflag: tar.TypeReg, data: raw}
	sg := entry{name: "manifest.sig", typeflag: tar.TypeReg, data: sig}
	kern := entry{name: "kernel", typeflag: tar.TypeReg, data: testKernel}
	init := entry{name: "initramfs", typeflag: tar.TypeReg, data: testInitramfs}
	extra := entry{name: "README", typeflag: tar.TypeReg, data: []byte("hi")}

	if _, _, _, err := readBundle(bytes.NewReader(writeTar(t, man, sg, kern, init)), testPolicy()); err != nil {
		t.Fatalf("hand-made bundle: %v", err)
	}
	for _, tc := range []struct {
		name string
		es   []entry
		want string
	}{
		{"extra first", []entry{extra, man, sg, kern, init}, `"README" where manifest.json should be`},
		{"extra middle", []entry{man, sg, extra, kern, init}, `"README" where kernel should be`},
		{"extra last", []entry{man, sg, kern, init, extra}, `"README" after initramfs`},
		{"duplicate initramfs", []entry{man, sg, kern, init, init}, `"initramfs" after initramfs`},
		{"duplicate kernel", []entry{man, sg, kern, kern, init}, `"kernel" where initramfs should be`},
		{"missing signature", []entry{man, kern, init}, `"kernel" where manifest.sig should be`},
		{"missing kernel", []entry{man, sg, init}, `"initramfs" where kernel should be`},
		{"missing initramfs", []entry{man, sg, kern}, "archive ends where initramfs should be"},
		{"signature first", []entry{sg, man, kern, init}, `"manifest.sig" where manifest.json should be`},
		{"parts swapped", []entry{man, sg, init, kern}, `"initramfs" where kernel should be`},
		{"empty", nil, "archive ends where manifest.json should be"},
		{"kernel is a symlink", []entry{man, sg, {name: "kernel", typeflag: tar.TypeSymlink}, init}, "kernel: type '2', want a regular file"},
		{"kernel is a directory", []entry{man, sg, {name: "kernel", typeflag: tar.TypeDir}, init}, "want a regular file"},
		{"path in name", []entry{man, sg, {name: "./kernel", typeflag: tar.TypeReg, data: testKernel}, init}, `"./kernel" where kernel should be`},
		{"short signature", []entry{man, {name: "manifest.sig", typeflag: tar.TypeReg, data: sig[:63]}, kern, init}, "manifest.sig: 63 bytes, want 64"},
		{"long signature", []entry{man, {name: "manifest.sig", typeflag: tar.TypeReg, data: append(sig, 0)}, kern, init}, "manifest.sig: 65 bytes, at most 64"},
		{"huge manifest entry", []entry{{name: "manifest.json", typeflag: tar.TypeReg, size: 1 << 30}}, "manifest.json: 1073741824 bytes, at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := readBundle(bytes.NewReader(writeTar(t, tc.es...)), testPolicy())
			refusal(t, err, ErrMalformed, tc.want)
		})
	}
	// A tar header size that differs from the signed one is refused before streaming.
	big := entry{name: "kernel", typeflag: tar.TypeReg, data: append(bytes.Clone(testKernel), 'x')}
	_, _, _, err := readBundle(bytes.NewReader(writeTar(t, man, sg, big, init)), testPolicy())
	refusal(t, err, ErrBadDigest, "kernel: archive entry is 1262 bytes, manifest says 1261")
}

func TestManifestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Manifest)
		want   string
	}{
		{"huge kernel", func(m *Manifest) { m.Kernel.Size = 1 << 40 }, "kernel.size: 1099511627776 is outside 1..268435456"},
		{"huge initramfs", func(m *Manifest) { m.Initramfs.Size = MaxPartSize + 1 }, "initramfs.size: 268435457 is outside"},
		{"negative size", func(m *Manifest) { m.Kernel.Size = -1 }, "kernel.size: -1 is outside"},
		{"empty kernel", func(m *Manifest) { m.Kernel.Size = 0 }, "kernel.size: 0 is outside"},
		{"short digest", func(m *Manifest) { m.Kernel.SHA256 = "abcd" }, `kernel.sha256: "abcd" is not 64`},
		{"uppercase digest", func(m *Manifest) { m.Initramfs.SHA256 = strings.ToUpper(m.Initramfs.SHA256) }, "initramfs.sha256"},
		{"format 2", func(m *Manifest) { m.Format = 2 }, "format: 2, this firmware reads format 1"},
		{"bad version", func(m *Manifest) { m.Version = "0.4.1" }, `manifest.json: version "0.4.1": does not start with v`},
		{"no board", func(m *Manifest) { m.Board = "" }, `board: "" is not a board name`},
		{"no build time", func(m *Manifest) { m.BuildTime = time.Time{} }, "buildTime: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := goodManifest()
			tc.modify(&m)
			raw, sig := signed(t, m, testKey(1))
			data := writeTar(t,
				entry{name: "manifest.json", typeflag: tar.TypeReg, data: raw},
				entry{name: "manifest.sig", typeflag: tar.TypeReg, data: sig},
				entry{name: "kernel", typeflag: tar.TypeReg, data: testKernel},
				entry{name: "initramfs", typeflag: tar.TypeReg, data: testInitramfs})
			_, err := Open(bytes.NewReader(data), testPolicy())
			refusal(t, err, ErrMalformed, tc.want)
		})
	}
}

func TestManifestStrictJSON(t *testing.T) {
	raw, _ := signed(t, goodManifest(), testKey(1))
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", strings.Replace(string(raw), `"format":1`, `"format":1,"extra":true`, 1), `unknown field "extra"`},
		{"trailing data", string(raw) + `{}`, "data after the JSON object"},
		{"not JSON", "hello", "manifest.json: invalid character"},
		{"wrong type", strings.Replace(string(raw), `"format":1`, `"format":"1"`, 1), "manifest.json: json: cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Signed with the right key: the refusal is the syntax's, not the signature's.
			data := writeTar(t,
				entry{name: "manifest.json", typeflag: tar.TypeReg, data: []byte(tc.json)},
				entry{name: "manifest.sig", typeflag: tar.TypeReg, data: ed25519.Sign(testKey(1).Key, []byte(tc.json))})
			_, err := Open(bytes.NewReader(data), testPolicy())
			refusal(t, err, ErrMalformed, tc.want)
		})
	}
}

// slowWriter feeds a pipe a few bytes at a time, the way a network upload arrives.
func TestStreamingPipe(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	pr, pw := io.Pipe()
	go func() {
		for rest := data; len(rest) > 0; {
			n := min(7, len(rest))
			if _, err := pw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		pw.Close()
	}()
	b, err := Open(iotest.OneByteReader(pr), testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	// Open read the manifest and signature only: the kernel is still in the pipe.
	var k, i bytes.Buffer
	if n, err := b.CopyKernel(&k); err != nil || n != int64(len(testKernel)) {
		t.Fatalf("CopyKernel: %d, %v", n, err)
	}
	if n, err := b.CopyInitramfs(&i); err != nil || n != int64(len(testInitramfs)) {
		t.Fatalf("CopyInitramfs: %d, %v", n, err)
	}
	if !bytes.Equal(k.Bytes(), testKernel) || !bytes.Equal(i.Bytes(), testInitramfs) {
		t.Error("parts differ")
	}
}

func TestOpenReadsOnlyTheManifest(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	l := entries(t, data)
	r := bytes.NewReader(data)
	if _, err := Open(r, testPolicy()); err != nil {
		t.Fatal(err)
	}
	if read := len(data) - r.Len(); read != l[1].end {
		t.Errorf("Open read %d bytes, want %d (manifest and signature)", read, l[1].end)
	}
}

type failingWriter struct{ left int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errDiskFull
	}
	w.left -= len(p)
	return len(p), nil
}

func TestWriterError(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	b, err := Open(bytes.NewReader(data), testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.CopyKernel(&failingWriter{left: 100})
	if !errors.Is(err, errDiskFull) || errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "kernel: write") {
		t.Fatalf("CopyKernel to a failing writer: %v", err)
	}
	if _, err2 := b.CopyInitramfs(io.Discard); !errors.Is(err2, errDiskFull) {
		t.Errorf("CopyInitramfs after a failed kernel: %v, want the kernel's error", err2)
	}

	b, _ = Open(bytes.NewReader(data), testPolicy())
	if _, err := b.CopyKernel(io.Discard); err != nil {
		t.Fatal(err)
	}
	_, err = b.CopyInitramfs(&failingWriter{left: 0})
	if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "initramfs: write") {
		t.Errorf("CopyInitramfs to a failing writer: %v", err)
	}
}

func TestCopyOrder(t *testing.T) {
	data := makeBundle(t, testRelease(), testKey(1))
	b, _ := Open(bytes.NewReader(data), testPolicy())
	if _, err := b.CopyInitramfs(io.Discard); err == nil || !strings.Contains(err.Error(), `next entry to read is "kernel"`) {
		t.Errorf("CopyInitramfs first: %v", err)
	}
	if _, err := b.CopyKernel(io.Discard); err != nil {
		t.Fatalf("CopyKernel after a misordered call: %v", err)
	}
	if _, err := b.CopyKernel(io.Discard); err == nil {
		t.Error("CopyKernel twice: no error")
	}
	if _, err := b.CopyInitramfs(io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CopyInitramfs(io.Discard); err == nil {
		t.Error("CopyInitramfs twice: no error")
	}
}

func TestCreateRefuses(t *testing.T) {
	key := testKey(1)
	for _, tc := range []struct {
		name              string
		rel               Release
		kernel, initramfs []byte
		key               PrivateKey
		want              error
		msg               string
	}{
		{"bad version", Release{Board: "qemu-x86_64", Version: "dev", BuildTime: testTime}, testKernel, testInitramfs, key, ErrMalformed, `"dev"`},
		{"bad board", Release{Board: "Qemu x86", Version: "v1.0.0", BuildTime: testTime}, testKernel, testInitramfs, key, ErrMalformed, `board: "Qemu x86"`},
		{"no build time", Release{Board: "qemu-x86_64", Version: "v1.0.0", BuildTime: time.Time{}}, testKernel, testInitramfs, key, ErrMalformed, "buildTime"},
		{"empty kernel", testRelease(), nil, testInitramfs, key, ErrMalformed, "kernel: size 0"},
		{"empty initramfs", testRelease(), testKernel, nil, key, ErrMalformed, "initramfs: size 0"},
		{"key ID mismatch", testRelease(), testKernel, testInitramfs, PrivateKey{ID: testKey(2).ID, Key: key.Key}, ErrBadKey, testKey(2).ID},
		{"no key", testRelease(), testKernel, testInitramfs, PrivateKey{}, ErrBadKey, "signing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Create(io.Discard, tc.rel, bytes.NewReader(tc.kernel), bytes.NewReader(tc.initramfs), tc.key)
			refusal(t, err, tc.want, tc.msg)
		})
	}
}

// growingFile returns different bytes on its second read, like a kernel rebuilt mid-bundle.
type growingFile struct {
	reads int
	r     *bytes.Reader
}

func (g *growingFile) Read(p []byte) (int, error) { return g.r.Read(p) }
func (g *growingFile) Seek(off int64, whence int) (int64, error) {
	g.reads++
	if g.reads == 2 {
		g.r = bytes.NewReader(bytes.ToUpper(testKernel))
	}
	return g.r.Seek(off, whence)
}

func TestCreateSourceChanged(t *testing.T) {
	_, err := Create(io.Discard, testRelease(), &growingFile{r: bytes.NewReader(testKernel)}, bytes.NewReader(testInitramfs), testKey(1))
	if err == nil || !strings.Contains(err.Error(), "kernel changed while the bundle was written") {
		t.Errorf("Create with a kernel that changed: %v", err)
	}
}

func ExampleOpen() {
	key := testKey(1)
	var bundle bytes.Buffer
	if _, err := Create(&bundle, Release{Board: "qemu-x86_64", Version: "v0.4.0", BuildTime: testTime},
		bytes.NewReader([]byte("kernel")), bytes.NewReader([]byte("initramfs")), key); err != nil {
		fmt.Println(err)
		return
	}
	_, err := Open(&bundle, Policy{Board: "qemu-arm64", Keys: []PublicKey{key.Public()}, Running: "v0.3.0"})
	fmt.Println(errors.Is(err, ErrWrongBoard), err)
	// Output: true bundle is for board qemu-x86_64, this gateway is qemu-arm64: wrong board
}

package initramfs

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/u-root/mkuimage/cpio"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/board/debian"
	"github.com/edgegate/edgegate/firmware/bundle"
)

// testKey is a fixed update key (from a fixed seed), so that images and their paths are
// the same in every run.
func testKey(t *testing.T, seed byte) bundle.PublicKey {
	t.Helper()
	pub, _, err := bundle.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// fakeSpec builds a Spec over a fake kernel tree: a board whose modules are a and d of
// fakeTree and whose driver is nic (needing b and mdio), an amd64 /init, a config, manifests, a test binary and one update key
// (testKey(t, 1)).
func fakeSpec(t *testing.T) Spec {
	t.Helper()
	dir, _ := fakeTree(t)
	writeModule(t, dir, "kernel/drivers/nic.ko", "name=nic", "depends=b,mdio", "alias=pci:v00008086d000010D3sv*sd*bc*sc*i*")
	writeModule(t, dir, "kernel/drivers/mdio.ko", "name=mdio")
	root := filepath.Dir(filepath.Dir(filepath.Dir(dir)))
	in := t.TempDir()
	writeFile(t, filepath.Join(in, "init"), fakeELF(t, elf.EM_X86_64, nil, false))
	writeFile(t, filepath.Join(in, "test"), fakeELF(t, elf.EM_X86_64, nil, false))
	writeFile(t, filepath.Join(in, "config.yaml"), []byte("proxyMode: ipvs\n"))
	writeFile(t, filepath.Join(in, "manifests", "web.yaml"), []byte("kind: Service\n"))
	writeFile(t, filepath.Join(in, "manifests", ".web.yaml.swp"), []byte("editor junk"))
	writeFile(t, filepath.Join(in, "manifests", "README"), []byte("not a manifest"))
	writeFile(t, filepath.Join(in, "firmware.pub"), testKey(t, 1).Marshal())
	return Spec{
		Board:      board.Board{Name: "fake-x86_64", Arch: "amd64", Modules: []string{"a", "d"}, Drivers: []string{"nic"}},
		Kernel:     debian.Kernel{Dir: root, Release: "6.1.0-test"},
		Init:       filepath.Join(in, "init"),
		Config:     filepath.Join(in, "config.yaml"),
		Manifests:  filepath.Join(in, "manifests"),
		TestBinary: filepath.Join(in, "test"),
		TestArgs:   []string{"-test.v=test2json", "-test.run=TestX"},
		UpdateKeys: []string{filepath.Join(in, "firmware.pub")},
	}
}

func build(t *testing.T, spec Spec) []byte {
	t.Helper()
	im, _, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := im.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildReproducible(t *testing.T) {
	first := build(t, fakeSpec(t))
	if second := build(t, fakeSpec(t)); !bytes.Equal(first, second) {
		t.Fatal("two builds from the same inputs differ")
	}
	// Other file times and a later clock change nothing either.
	spec := fakeSpec(t)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, f := range []string{spec.Init, spec.TestBinary, spec.Config} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if third := build(t, spec); !bytes.Equal(first, third) {
		t.Fatal("a build with other file times differs")
	}
	// The gzip header names no file and no time.
	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header has name %q, time %v", zr.Name, zr.ModTime)
	}
}

func TestBuildLayout(t *testing.T) {
	spec := fakeSpec(t)
	recs := readArchive(t, build(t, spec))
	var got []string
	content := map[string]string{}
	for _, r := range recs {
		if r.MTime != 0 || r.UID != 0 || r.GID != 0 || r.Ino != 0 {
			t.Errorf("%s: mtime %d uid %d gid %d ino %d, want all 0", r.Name, r.MTime, r.UID, r.GID, r.Ino)
		}
		got = append(got, r.Name)
		if r.Mode&cpio.S_IFMT == cpio.S_IFREG {
			b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
			if err != nil {
				t.Fatal(err)
			}
			content[r.Name] = string(b)
		}
		if r.Name == "init" && r.Mode != cpio.S_IFREG|0o755 {
			t.Errorf("init mode %o, want 100755", r.Mode)
		}
	}
	key := testKey(t, 1)
	want := []string{
		"edgegate-test",
		"etc", "etc/edgegate", "etc/edgegate/board", "etc/edgegate/config.yaml",
		"etc/edgegate/manifests", "etc/edgegate/manifests/web.yaml", "etc/edgegate/test",
		"etc/edgegate/update-keys", "etc/edgegate/update-keys/" + key.ID + ".pub",
		"init",
		"lib", "lib/modules", "lib/modules/6.1.0-test", "lib/modules/6.1.0-test/edgegate.order",
		"lib/modules/6.1.0-test/kernel",
		"lib/modules/6.1.0-test/kernel/drivers", "lib/modules/6.1.0-test/kernel/drivers/mdio.ko",
		"lib/modules/6.1.0-test/kernel/drivers/nic.ko",
		"lib/modules/6.1.0-test/kernel/lib", "lib/modules/6.1.0-test/kernel/lib/crc-impl.ko",
		"lib/modules/6.1.0-test/kernel/net",
		"lib/modules/6.1.0-test/kernel/net/a.ko", "lib/modules/6.1.0-test/kernel/net/b.ko",
		"lib/modules/6.1.0-test/kernel/net/c.ko", "lib/modules/6.1.0-test/kernel/net/d.ko",
		"lib/modules/6.1.0-test/kernel/net/e.ko",
		"lib/modules/6.1.0-test/modules.alias", "lib/modules/6.1.0-test/modules.dep",
	}
	if !slices.Equal(got, want) {
		t.Errorf("archive entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	order := "kernel/lib/crc-impl.ko\nkernel/net/c.ko\nkernel/net/b.ko\nkernel/net/a.ko\nkernel/net/d.ko\nkernel/net/e.ko\n"
	if c := content["lib/modules/6.1.0-test/edgegate.order"]; c != order {
		t.Errorf("order file:\n%s\nwant:\n%s", c, order)
	}
	// depmod's formats: a module's dependencies load last to first.
	deps := "kernel/lib/crc-impl.ko:\nkernel/net/c.ko:\nkernel/net/b.ko: kernel/net/c.ko\n" +
		"kernel/net/a.ko: kernel/net/b.ko kernel/net/c.ko kernel/lib/crc-impl.ko\nkernel/net/d.ko:\nkernel/net/e.ko:\n" +
		"kernel/drivers/mdio.ko:\nkernel/drivers/nic.ko: kernel/drivers/mdio.ko kernel/net/b.ko kernel/net/c.ko\n"
	for name, want := range map[string]string{
		"lib/modules/6.1.0-test/modules.dep":          deps,
		"lib/modules/6.1.0-test/modules.alias":        "alias pci:v00008086d000010D3sv*sd*bc*sc*i* nic\n",
		"etc/edgegate/board":                          "fake-x86_64\n",
		"etc/edgegate/test":                           "-test.v=test2json -test.run=TestX\n",
		"etc/edgegate/config.yaml":                    "proxyMode: ipvs\n",
		"etc/edgegate/update-keys/" + key.ID + ".pub": string(key.Marshal()),
	} {
		if content[name] != want {
			t.Errorf("%s = %q, want %q", name, content[name], want)
		}
	}
}

// readArchive gunzips and reads every record of an archive, trailer excluded.
func readArchive(t *testing.T, archive []byte) []cpio.Record {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.EOFReader{RecordReader: cpio.Newc.Reader(bytes.NewReader(raw))})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestBuildRejectsBinaries(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"dynamic":    {fakeELF(t, elf.EM_X86_64, nil, true), "dynamically linked"},
		"other arch": {fakeELF(t, elf.EM_AARCH64, nil, false), "built for EM_AARCH64"},
		"not elf":    {[]byte(strings.Repeat("#!/bin/sh\n", 10)), "bad magic"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := fakeSpec(t)
			spec.Init = filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			writeFile(t, spec.Init, tc.data)
			if _, _, err := Build(spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestImageAdd(t *testing.T) {
	im := NewImage()
	if err := im.Add("/etc/edgegate/board", []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		perm os.FileMode
	}{
		{"/etc/edgegate/board", 0o644}, // twice
		{"etc/relative", 0o644},
		{"/etc/../init", 0o644},
		{"/etc/edgegate/board/x", 0o644}, // under a file
		{"/etc/edgegate", 0o644},         // over a directory
		{"/init", os.ModeSetuid | 0o755},
	} {
		if err := im.Add(tc.name, nil, tc.perm); err == nil {
			t.Errorf("Add(%q, %v) succeeded", tc.name, tc.perm)
		}
	}
	if got := im.Paths(); !slices.Equal(got, []string{"/etc/edgegate/board"}) {
		t.Errorf("Paths() = %v after refused adds", got)
	}
}

func TestBuildTestArgs(t *testing.T) {
	spec := fakeSpec(t)
	spec.TestArgs = []string{"-test.run=a b"}
	if _, _, err := Build(spec); err == nil {
		t.Error("an argument with a space was accepted")
	}
	spec = fakeSpec(t)
	spec.TestBinary = ""
	if _, _, err := Build(spec); err == nil {
		t.Error("test arguments without a test binary were accepted")
	}
}

func TestBuildUpdateKeys(t *testing.T) {
	spec := fakeSpec(t)
	dir := t.TempDir()
	second := filepath.Join(dir, "second.pub")
	writeFile(t, second, testKey(t, 2).Marshal())
	spec.UpdateKeys = append(spec.UpdateKeys, second)
	im, _, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{testKey(t, 1).ID, testKey(t, 2).ID}
	slices.Sort(want)
	if got := UpdateKeyIDs(im.Paths()); !slices.Equal(got, want) {
		t.Errorf("UpdateKeyIDs = %v, want %v", got, want)
	}

	spec.UpdateKeys = nil
	if im, _, err = Build(spec); err != nil {
		t.Fatal(err)
	}
	if got := UpdateKeyIDs(im.Paths()); got == nil || len(got) != 0 {
		t.Errorf("UpdateKeyIDs without keys = %#v, want an empty list (build.json shows [])", got)
	}

	_, priv, err := bundle.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "firmware.key")
	writeFile(t, private, priv.Marshal())
	corrupt := filepath.Join(dir, "corrupt.pub")
	writeFile(t, corrupt, bytes.Replace(testKey(t, 1).Marshal(), []byte(testKey(t, 1).ID), []byte(testKey(t, 2).ID), 1))
	for name, tc := range map[string]struct {
		keys []string
		want string
	}{
		"missing":     {[]string{filepath.Join(dir, "nope.pub")}, "no such file"},
		"private key": {[]string{private}, "key type"},
		"wrong id":    {[]string{corrupt}, "the key's ID is"},
		"twice":       {[]string{second, second}, "given twice"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := fakeSpec(t)
			spec.UpdateKeys = tc.keys
			if _, _, err := Build(spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build with update keys %v = %v, want an error with %q", tc.keys, err, tc.want)
			}
		})
	}
}

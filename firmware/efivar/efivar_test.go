package efivar

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEncodeDecode(t *testing.T) {
	raw := Encode("edgegate-b*.conf")
	want := []byte{0x07, 0, 0, 0, 'e', 0}
	if !bytes.HasPrefix(raw, want) || !bytes.HasSuffix(raw, []byte{'f', 0, 0, 0}) || len(raw) != 4+2*17 {
		t.Fatalf("Encode: % x", raw)
	}
	for _, v := range []string{"", "edgegate-b*.conf", "systemd-boot 252.39-1~deb12u2", "é€"} {
		got, err := Decode(Encode(v))
		if err != nil || got != v {
			t.Errorf("Decode(Encode(%q)) = %q, %v", v, got, err)
		}
	}
	// Data after the NUL is not the string's.
	if got, err := Decode(append(Encode("ab"), 'c', 0)); err != nil || got != "ab" {
		t.Errorf("after the NUL: %q %v", got, err)
	}
	for _, bad := range [][]byte{nil, {7, 0, 0}, {7, 0, 0, 0, 'a'}} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(% x) accepted", bad)
		}
	}
}

// TestStore runs the store on a plain directory, with the immutable flag efivarfs gives the
// files of variables it does not know: Set and Delete must clear it first.
func TestStore(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if v, err := s.OneShot(); err != nil || v != "" {
		t.Fatalf("OneShot with none set: %q %v", v, err)
	}
	if _, err := s.Loader(); !errors.Is(err, fs.ErrNotExist) || !bytes.Contains([]byte(err.Error()), []byte(LoaderInfo)) {
		t.Errorf("Loader with none set: %v, want not-exist naming %s", err, LoaderInfo)
	}
	if err := s.BootOnce("edgegate-b*.conf"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.Dir, LoaderEntryOneShot+"-"+LoaderVendor)
	raw, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(raw, Encode("edgegate-b*.conf")) {
		t.Fatalf("the variable's file: % x %v", raw, err)
	}
	setImmutable(t, p)
	if err := s.BootOnce("edgegate-a*.conf"); err != nil {
		t.Fatalf("BootOnce over an immutable file: %v", err)
	}
	if v, err := s.OneShot(); err != nil || v != "edgegate-a*.conf" {
		t.Errorf("OneShot: %q %v", v, err)
	}
	setImmutable(t, p)
	if err := s.Delete(LoaderEntryOneShot); err != nil {
		t.Fatalf("Delete of an immutable file: %v", err)
	}
	if v, err := s.OneShot(); err != nil || v != "" {
		t.Errorf("OneShot after Delete: %q %v", v, err)
	}
	if err := s.Delete(LoaderEntryOneShot); err != nil {
		t.Errorf("Delete of a variable not set: %v", err)
	}
}

// setImmutable sets FS_IMMUTABLE_FL, as efivarfs does; the test machine's file systems
// (ext4, root) support it, and a test that could not set it would prove nothing.
func setImmutable(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("FS_IOC_GETFLAGS on %s: %v", p, err)
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|immutableFlag)); err != nil {
		t.Fatalf("setting the immutable flag on %s (the tests run as root on ext4): %v", p, err)
	}
	t.Cleanup(func() {
		if g, err := os.Open(p); err == nil {
			_ = unix.IoctlSetPointerInt(int(g.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^immutableFlag))
			g.Close()
		}
	})
	if err := os.WriteFile(p, []byte("x"), 0o644); err == nil {
		t.Fatalf("%s is writable with the immutable flag set", p)
	}
}

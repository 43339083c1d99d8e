package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func egbundle(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	code, out, errOut := egbundle(t, "keys", "-dir", keys)
	if code != 0 || !strings.Contains(out, "new development key pair") {
		t.Fatalf("keys: %d %q %q", code, out, errOut)
	}
	for name, want := range map[string]os.FileMode{"firmware.key": 0o600, "firmware.pub": 0o644} {
		fi, err := os.Stat(filepath.Join(keys, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", name, err, fi.Mode().Perm(), want)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(keys, "firmware.pub"))
	// A second run keeps the pair.
	if code, out, _ := egbundle(t, "keys", "-dir", keys); code != 0 || !strings.Contains(out, "exists") {
		t.Errorf("keys again: %d %q", code, out)
	}
	if again, _ := os.ReadFile(filepath.Join(keys, "firmware.pub")); !bytes.Equal(pub, again) {
		t.Error("keys replaced an existing pair")
	}

	kernel, initramfs := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.gz")
	os.WriteFile(kernel, bytes.Repeat([]byte("k"), 5000), 0o644)
	os.WriteFile(initramfs, bytes.Repeat([]byte("i"), 3000), 0o644)
	out1 := filepath.Join(dir, "a.bundle")
	code, out, errOut = egbundle(t, "make", "-board", "qemu-x86_64", "-version", "v0.4.0-12-gabc1234",
		"-kernel", kernel, "-initramfs", initramfs, "-key", filepath.Join(keys, "firmware.key"),
		"-out", out1, "-build-time", "2025-11-23T09:41:00Z")
	if code != 0 || !strings.Contains(out, "kernel     5000 bytes") {
		t.Fatalf("make: %d %q %q", code, out, errOut)
	}

	pubPath := filepath.Join(keys, "firmware.pub")
	code, out, errOut = egbundle(t, "verify", "-board", "qemu-x86_64", "-pub", pubPath, "-running", "v0.4.0", out1)
	if code != 0 || !strings.HasSuffix(out, "OK\n") || !strings.Contains(out, "version    v0.4.0-12-gabc1234") ||
		!strings.Contains(out, "buildTime  2025-11-23T09:41:00Z") {
		t.Errorf("verify: %d %q %q", code, out, errOut)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong board", []string{"-board", "qemu-arm64", "-pub", pubPath, "-running", "v0.4.0"},
			"bundle is for board qemu-x86_64, this gateway is qemu-arm64: wrong board"},
		{"same version", []string{"-board", "qemu-x86_64", "-pub", pubPath, "-running", "v0.4.0-12-gabc1234"}, "a reinstall needs Force"},
		{"older", []string{"-board", "qemu-x86_64", "-pub", pubPath, "-running", "v1.0.0"}, "a downgrade needs Force"},
	} {
		code, out, errOut := egbundle(t, append(append([]string{"verify"}, tc.args...), out1)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "OK") {
			t.Errorf("verify %s: %d %q %q, want exit 1 and %q", tc.name, code, out, errOut, tc.want)
		}
	}
	if code, out, errOut := egbundle(t, "verify", "-board", "qemu-x86_64", "-pub", pubPath, "-running", "v1.0.0", "-force", out1); code != 0 {
		t.Errorf("verify -force: %d %q %q", code, out, errOut)
	}

	// Another key pair: its public key alone does not verify; both trusted, it does.
	other := filepath.Join(dir, "other")
	egbundle(t, "keys", "-dir", other)
	otherPub := filepath.Join(other, "firmware.pub")
	if code, _, errOut := egbundle(t, "verify", "-board", "qemu-x86_64", "-pub", otherPub, "-running", "v0.4.0", out1); code != 1 ||
		!strings.Contains(errOut, "unknown signing key") {
		t.Errorf("verify with another key: %d %q", code, errOut)
	}
	if code, _, errOut := egbundle(t, "verify", "-board", "qemu-x86_64", "-pub", otherPub, "-pub", pubPath, "-running", "v0.4.0", out1); code != 0 {
		t.Errorf("verify with both keys: %d %q", code, errOut)
	}

	// A tampered kernel byte.
	data, _ := os.ReadFile(out1)
	data[bytes.Index(data, []byte("kkkk"))+100] = 'x'
	tampered := filepath.Join(dir, "tampered.bundle")
	os.WriteFile(tampered, data, 0o644)
	if code, out, errOut := egbundle(t, "verify", "-board", "qemu-x86_64", "-pub", pubPath, "-running", "v0.4.0", tampered); code != 1 ||
		!strings.Contains(errOut, "kernel: sha256") || strings.Contains(out, "OK") {
		t.Errorf("verify tampered: %d %q %q", code, out, errOut)
	}
}

func TestMakeRefuses(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	egbundle(t, "keys", "-dir", keys)
	kernel := filepath.Join(dir, "vmlinuz")
	os.WriteFile(kernel, []byte("k"), 0o644)
	out := filepath.Join(dir, "x.bundle")
	base := []string{"make", "-board", "qemu-x86_64", "-kernel", kernel, "-initramfs", kernel, "-key", filepath.Join(keys, "firmware.key"), "-out", out}

	code, _, errOut := egbundle(t, append(base, "-version", "6dfca84-dirty")...)
	if code != 1 || !strings.Contains(errOut, `version "6dfca84-dirty": does not start with v`) {
		t.Errorf("make with a bare commit version: %d %q", code, errOut)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed make left %s: %v", out, err)
	}
	if matches, _ := filepath.Glob(out + ".tmp*"); len(matches) > 0 {
		t.Errorf("a failed make left %v", matches)
	}
	os.Chmod(filepath.Join(keys, "firmware.key"), 0o644)
	if code, _, errOut := egbundle(t, append(base, "-version", "v1.0.0")...); code != 1 || !strings.Contains(errOut, "mode 0644, want 0600") {
		t.Errorf("make with a readable key: %d %q", code, errOut)
	}
	if code, _, errOut := egbundle(t, "make", "-board", "qemu-x86_64"); code != 2 || !strings.Contains(errOut, "-version is required") {
		t.Errorf("make without flags: %d %q", code, errOut)
	}
}

func TestKeysRefusesHalfAPair(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "firmware.pub"), []byte("x"), 0o644)
	if code, _, errOut := egbundle(t, "keys", "-dir", dir); code != 1 || !strings.Contains(errOut, "exists without") {
		t.Errorf("keys with a lone public key: %d %q", code, errOut)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"sign"}, {"verify", "-board", "b", "-pub", "p", "-running", "v1.0.0"}, {"verify", "-board", "b", "-pub", "p", "x"}} {
		if code, _, _ := egbundle(t, args...); code != 2 {
			t.Errorf("egbundle %q: exit %d, want 2", args, code)
		}
	}
}

func TestResolveBuildTime(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		flag, epoch string
		want        time.Time
	}{
		{"2025-11-23T09:41:00Z", "1", time.Date(2025, 11, 23, 9, 41, 0, 0, time.UTC)},
		{"", "1700000000", time.Unix(1700000000, 0)},
		{"", "", now},
	} {
		got, err := resolveBuildTime(tc.flag, tc.epoch, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("resolveBuildTime(%q, %q) = %v, %v; want %v", tc.flag, tc.epoch, got, err, tc.want)
		}
	}
	if _, err := resolveBuildTime("", "soon", now); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}

// TestEpochAndNextKeys: make signs an epoch and a next key set, verify prints them and
// refuses the bundle below -min-epoch even with -force.
func TestEpochAndNextKeys(t *testing.T) {
	dir := t.TempDir()
	keys, next := filepath.Join(dir, "keys"), filepath.Join(dir, "next")
	egbundle(t, "keys", "-dir", keys)
	egbundle(t, "keys", "-dir", next)
	kernel := filepath.Join(dir, "vmlinuz")
	os.WriteFile(kernel, bytes.Repeat([]byte("k"), 700), 0o644)
	out := filepath.Join(dir, "e.bundle")
	pubPath, nextPub := filepath.Join(keys, "firmware.pub"), filepath.Join(next, "firmware.pub")
	base := []string{"make", "-board", "qemu-x86_64", "-version", "v1.0.0", "-kernel", kernel, "-initramfs", kernel,
		"-key", filepath.Join(keys, "firmware.key"), "-out", out, "-security-epoch", "3"}
	if code, _, errOut := egbundle(t, append(base, "-next-key", nextPub)...); code != 2 || !strings.Contains(errOut, "go together") {
		t.Errorf("make -next-key without -key-generation: %d %q", code, errOut)
	}
	code, stdout, errOut := egbundle(t, append(base, "-next-key", nextPub, "-key-generation", "1")...)
	nextData, _ := os.ReadFile(nextPub)
	nextID := strings.Fields(string(nextData))[1]
	if code != 0 || !strings.Contains(stdout, "epoch      3\n") || !strings.Contains(stdout, "nextKeys   generation 1: "+nextID) {
		t.Fatalf("make: %d %q %q", code, stdout, errOut)
	}
	verify := []string{"verify", "-board", "qemu-x86_64", "-pub", pubPath, "-force"}
	if code, stdout, errOut := egbundle(t, append(verify, "-min-epoch", "3", out)...); code != 0 || !strings.Contains(stdout, "epoch      3\n") {
		t.Errorf("verify at floor 3: %d %q %q", code, stdout, errOut)
	}
	if code, _, errOut := egbundle(t, append(verify, "-min-epoch", "4", out)...); code != 1 ||
		!strings.Contains(errOut, "security epoch 3, below this gateway's floor 4") {
		t.Errorf("verify at floor 4: %d %q", code, errOut)
	}
}

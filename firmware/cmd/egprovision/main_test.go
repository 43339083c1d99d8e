package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"no disk":        {nil, 2, "-disk is required"},
		"stray argument": {[]string{"-disk", "x.img", "y"}, 2, "-disk is required"},
		"http":           {[]string{"-disk", "x.img", "-api-server", "http://10.0.0.1:6443", "-token-file", token}, 1, "want an https:// URL"},
		"missing file":   {[]string{"-disk", "x.img", "-network", filepath.Join(dir, "nope.yaml")}, 1, "no such file"},
		"image without yes": {[]string{"-disk", "/dev/null", "-image", "disk.img", "-network", writeFile(t, dir, "n.yaml", "ip: [eth0:dhcp]\n")},
			1, "destroys what it holds: run again with -yes"},
		"not a disk image": {[]string{"-disk", writeFile(t, dir, "blank.img", strings.Repeat("\x00", 1<<20)), "-network", writeFile(t, dir, "n2.yaml", "ip: [eth0:dhcp]\n")},
			1, "no edgegate disk image on it"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d with %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

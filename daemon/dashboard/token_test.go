package dashboard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tok, path, generated, err := LoadToken("", dir)
	if err != nil || !generated || len(tok) != 40 || path != filepath.Join(dir, TokenFileName) {
		t.Fatalf("first start: %q %q %v %v; want a generated 40-character token in the state dir", tok, path, generated, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file %v %v, want mode 0600", fi.Mode(), err)
	}
	again, _, generated, err := LoadToken("", dir)
	if err != nil || generated || again != tok {
		t.Errorf("second start: %q generated=%v %v; want the same token, loaded", again, generated, err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadToken(file, dir); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a 5-character token file: %v, want an error naming the file", err)
	}
	if err := os.WriteFile(file, []byte("  configured-token-1234 \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, generated, err := LoadToken(file, dir); err != nil || generated || got != "configured-token-1234" {
		t.Errorf("configured token: %q %v %v", got, generated, err)
	}
	if _, _, _, err := LoadToken(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("a configured token file that does not exist must be an error, not a new token")
	}
	if _, _, _, err := LoadToken("", ""); err == nil || !strings.Contains(err.Error(), "--dashboard-token-file") {
		t.Errorf("no file and no state dir: %v, want an error naming the flag", err)
	}
}

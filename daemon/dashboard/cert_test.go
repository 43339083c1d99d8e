package dashboard

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCertGeneratedOnceAndReused(t *testing.T) {
	dir := t.TempDir()
	req := CertRequest{StateDir: dir, Names: []string{"gw-1"}, IPs: []netip.Addr{netip.MustParseAddr("10.200.1.1")}}
	first, err := LoadCert(req)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Generated || first.Replaced {
		t.Errorf("first start: generated %v replaced %v, want a new pair", first.Generated, first.Replaced)
	}
	for _, name := range []string{CertFileName, KeyFileName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	leaf, err := x509.ParseCertificate(first.Certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("10.200.1.1"); err != nil {
		t.Errorf("the certificate does not name the node IP: %v", err)
	}
	again, err := LoadCert(req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Generated || again.SHA256 != first.SHA256 || again.SPKISHA256 != first.SPKISHA256 {
		t.Errorf("second start: generated %v, %s/%s; want the first pair %s/%s reused", again.Generated, again.SHA256, again.SPKISHA256, first.SHA256, first.SPKISHA256)
	}

	// A key file that no longer parses: a new pair, and the caller is told why.
	if err := os.WriteFile(filepath.Join(dir, KeyFileName), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := LoadCert(req)
	if err != nil {
		t.Fatal(err)
	}
	if !third.Generated || !third.Replaced || third.Problem == nil || third.SPKISHA256 == first.SPKISHA256 {
		t.Errorf("unreadable key: generated %v replaced %v problem %v, same key %v; want a new key and the reason", third.Generated, third.Replaced, third.Problem, third.SPKISHA256 == first.SPKISHA256)
	}
}

func TestCertOperatorFiles(t *testing.T) {
	dir := t.TempDir()
	gen, err := LoadCert(CertRequest{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	own := t.TempDir()
	certFile, keyFile := filepath.Join(own, "tls.crt"), filepath.Join(own, "tls.key")
	for from, to := range map[string]string{filepath.Join(dir, CertFileName): certFile, filepath.Join(dir, KeyFileName): keyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	c, err := LoadCert(CertRequest{CertFile: certFile, KeyFile: keyFile, StateDir: empty})
	if err != nil {
		t.Fatal(err)
	}
	if c.Generated || c.CertFile != certFile || c.SHA256 != gen.SHA256 {
		t.Errorf("operator files: %+v, want %s loaded as is", c, certFile)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("with the operator's files, the state directory got %d files", len(ents))
	}
	if _, err := LoadCert(CertRequest{CertFile: certFile, StateDir: empty}); err == nil || !strings.Contains(err.Error(), "set both") {
		t.Errorf("a certificate without its key: %v, want refused", err)
	}
	if _, err := LoadCert(CertRequest{CertFile: certFile, KeyFile: filepath.Join(own, "missing.key")}); err == nil {
		t.Error("a missing operator key loaded; want an error (no fallback to a generated pair)")
	}
}

// TestFingerprints checks both hashes against their definitions, computed independently
// from the PEM file: SHA-256 of the DER certificate, and of its SubjectPublicKeyInfo.
func TestFingerprints(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadCert(CertRequest{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CertFileName))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	sum := sha256.Sum256(block.Bytes)
	want := strings.ToUpper(hex.EncodeToString(sum[:]))
	if got := strings.ReplaceAll(c.SHA256, ":", ""); got != want || len(c.SHA256) != 95 {
		t.Errorf("certificate SHA-256 %s, want %s in colon form", c.SHA256, want)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	if want := base64.StdEncoding.EncodeToString(spki[:]); c.SPKISHA256 != want {
		t.Errorf("SPKI SHA-256 %s, want %s", c.SPKISHA256, want)
	}
	cfg := TLSConfig(c)
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS minimum version %x, want 1.2", cfg.MinVersion)
	}
}

package bundle

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	pub, priv, err := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	if pub.ID != priv.ID || len(pub.ID) != 16 {
		t.Fatalf("key IDs %q and %q", pub.ID, priv.ID)
	}
	gotPub, err := ParsePublicKey(pub.Marshal())
	if err != nil || gotPub.ID != pub.ID || !gotPub.Key.Equal(pub.Key) {
		t.Errorf("public key round trip: %+v, %v", gotPub, err)
	}
	gotPriv, err := ParsePrivateKey(priv.Marshal())
	if err != nil || gotPriv.ID != priv.ID || !gotPriv.Key.Equal(priv.Key) {
		t.Errorf("private key round trip: %v", err)
	}
	if !strings.HasPrefix(string(pub.Marshal()), "edgegate-firmware-ed25519-public "+pub.ID+" ") {
		t.Errorf("public key file: %q", pub.Marshal())
	}
	if strings.Contains(string(pub.Marshal()), base64.StdEncoding.EncodeToString(priv.Key.Seed())) {
		t.Error("the public key file holds the seed")
	}
}

func TestKeyID(t *testing.T) {
	// sha256 of 32 zero bytes is 66687aadf862bd77...
	if got := KeyID(make(ed25519.PublicKey, 32)); got != "66687aadf862bd77" {
		t.Errorf("KeyID(zeros) = %s", got)
	}
}

func TestParseKeyRefuses(t *testing.T) {
	pub, priv := testKey(1).Public(), testKey(1)
	other := testKey(2).Public()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	pubB64 := base64.StdEncoding.EncodeToString(pub.Key)
	for _, tc := range []struct {
		name, file, want string
		private          bool
	}{
		{"bad base64", "edgegate-firmware-ed25519-public " + pub.ID + " not*base64", "key is not base64", false},
		{"unpadded base64", "edgegate-firmware-ed25519-public " + pub.ID + " " + strings.TrimRight(pubB64, "="), "key is not base64", false},
		{"short key", "edgegate-firmware-ed25519-public " + pub.ID + " " + b64(31), "key is 31 bytes, want 32", false},
		{"long key", "edgegate-firmware-ed25519-public " + pub.ID + " " + b64(64), "key is 64 bytes, want 32", false},
		{"key ID mismatch", "edgegate-firmware-ed25519-public " + other.ID + " " + pubB64,
			"file says key ID " + other.ID + ", the key's ID is " + pub.ID, false},
		{"private key ID mismatch", strings.Replace(string(priv.Marshal()), priv.ID, other.ID, 1),
			"file says key ID " + other.ID, true},
		{"bad key ID", "edgegate-firmware-ed25519-public XYZ " + pubB64, `key ID "XYZ" is not 16 lowercase hex`, false},
		{"private file as public", string(priv.Marshal()), `key type "edgegate-firmware-ed25519-private", want edgegate-firmware-ed25519-public`, false},
		{"public file as private", string(pub.Marshal()), `want edgegate-firmware-ed25519-private`, true},
		{"two lines", string(pub.Marshal()) + string(pub.Marshal()), "want one line", false},
		{"extra field", strings.TrimSuffix(string(pub.Marshal()), "\n") + " comment", "4 space-separated fields", false},
		{"empty", "", "1 space-separated fields", false},
		{"CRLF", strings.TrimSuffix(string(pub.Marshal()), "\n") + "\r\n", "want one line", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.private {
				_, err = ParsePrivateKey([]byte(tc.file))
			} else {
				_, err = ParsePublicKey([]byte(tc.file))
			}
			refusal(t, err, ErrBadKey, tc.want)
		})
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv := testKey(1)
	pubPath, privPath := filepath.Join(dir, "firmware.pub"), filepath.Join(dir, "firmware.key")
	if err := os.WriteFile(pubPath, priv.Public().Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(privPath, priv.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadPublicKeyFile(pubPath); err != nil || k.ID != priv.ID {
		t.Errorf("ReadPublicKeyFile: %v", err)
	}
	if k, err := ReadPrivateKeyFile(privPath); err != nil || k.ID != priv.ID {
		t.Errorf("ReadPrivateKeyFile: %v", err)
	}
	if err := os.Chmod(privPath, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := ReadPrivateKeyFile(privPath)
	refusal(t, err, ErrBadKey, privPath, "mode 0640, want 0600")

	// The file name leads the message so the operator knows which of several files is bad.
	bad := filepath.Join(dir, "bad.pub")
	if err := os.WriteFile(bad, []byte("edgegate-firmware-ed25519-public 0011223344556677 AAAA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadPublicKeyFile(bad)
	refusal(t, err, ErrBadKey, bad+": ", "key is 3 bytes")

	if _, err := ReadPublicKeyFile(filepath.Join(dir, "missing.pub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	huge := filepath.Join(dir, "huge.pub")
	if err := os.WriteFile(huge, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadPublicKeyFile(huge)
	refusal(t, err, ErrBadKey, "larger than 1024 bytes")
}

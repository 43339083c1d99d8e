package bundle

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// Key files are one line of text, so that a public key can be pasted into a build
// configuration and a review shows which key changed:
//
//	edgegate-firmware-ed25519-public <keyID> <base64 of the 32-byte public key>
//	edgegate-firmware-ed25519-private <keyID> <base64 of the 32-byte seed>
//
// The key ID is repeated in both so that a truncated or mixed-up file is caught on load.
const (
	publicKeyType  = "edgegate-firmware-ed25519-public"
	privateKeyType = "edgegate-firmware-ed25519-private"
)

// PublicKey is a trusted signing key and its ID.
type PublicKey struct {
	ID  string
	Key ed25519.PublicKey
}

// PrivateKey is a signing key and the ID of its public half.
type PrivateKey struct {
	ID  string
	Key ed25519.PrivateKey
}

// KeyID is the hex of the first 8 bytes of sha256(pub): short enough to print, long enough
// that two keys of one fleet do not collide by accident (the signature is the security).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey makes a key pair from rand (crypto/rand.Reader outside tests).
func GenerateKey(rand io.Reader) (PublicKey, PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return PublicKey{}, PrivateKey{}, fmt.Errorf("generate ed25519 key: %w", err)
	}
	id := KeyID(pub)
	return PublicKey{ID: id, Key: pub}, PrivateKey{ID: id, Key: priv}, nil
}

// Public is the public half of k.
func (k PrivateKey) Public() PublicKey {
	return PublicKey{ID: k.ID, Key: k.Key.Public().(ed25519.PublicKey)}
}

// Marshal is k's key file.
func (k PublicKey) Marshal() []byte {
	return []byte(publicKeyType + " " + k.ID + " " + base64.StdEncoding.EncodeToString(k.Key) + "\n")
}

// Marshal is k's key file; it holds the secret, write it with mode 0600.
func (k PrivateKey) Marshal() []byte {
	return []byte(privateKeyType + " " + k.ID + " " + base64.StdEncoding.EncodeToString(k.Key.Seed()) + "\n")
}

// ParsePublicKey parses a public key file; errors wrap ErrBadKey.
func ParsePublicKey(data []byte) (PublicKey, error) {
	id, raw, err := parseKeyLine(data, publicKeyType, ed25519.PublicKeySize)
	if err != nil {
		return PublicKey{}, err
	}
	pub := ed25519.PublicKey(raw)
	if got := KeyID(pub); got != id {
		return PublicKey{}, fmt.Errorf("public key: file says key ID %s, the key's ID is %s: %w", id, got, ErrBadKey)
	}
	return PublicKey{ID: id, Key: pub}, nil
}

// ParsePrivateKey parses a private key file; errors wrap ErrBadKey and never quote the secret.
func ParsePrivateKey(data []byte) (PrivateKey, error) {
	id, seed, err := parseKeyLine(data, privateKeyType, ed25519.SeedSize)
	if err != nil {
		return PrivateKey{}, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	if got := KeyID(priv.Public().(ed25519.PublicKey)); got != id {
		return PrivateKey{}, fmt.Errorf("private key: file says key ID %s, the key's ID is %s: %w", id, got, ErrBadKey)
	}
	return PrivateKey{ID: id, Key: priv}, nil
}

func parseKeyLine(data []byte, wantType string, size int) (id string, raw []byte, err error) {
	line, _ := strings.CutSuffix(string(data), "\n")
	if strings.ContainsAny(line, "\r\n") {
		return "", nil, fmt.Errorf("%s: want one line: %w", wantType, ErrBadKey)
	}
	fields := strings.Split(line, " ")
	if len(fields) != 3 {
		return "", nil, fmt.Errorf("%s: want %q, %d space-separated fields found: %w",
			wantType, wantType+" <keyID> <base64>", len(fields), ErrBadKey)
	}
	if fields[0] != wantType {
		return "", nil, fmt.Errorf("key type %q, want %s: %w", truncate(fields[0], 40), wantType, ErrBadKey)
	}
	if id = fields[1]; !hexKeyID.MatchString(id) {
		return "", nil, fmt.Errorf("%s: key ID %q is not 16 lowercase hex digits: %w", wantType, truncate(id, 40), ErrBadKey)
	}
	raw, err = base64.StdEncoding.Strict().DecodeString(fields[2])
	if err != nil {
		return "", nil, fmt.Errorf("%s %s: key is not base64: %s: %w", wantType, id, err, ErrBadKey)
	}
	if len(raw) != size {
		return "", nil, fmt.Errorf("%s %s: key is %d bytes, want %d: %w", wantType, id, len(raw), size, ErrBadKey)
	}
	return id, raw, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// maxKeyFile bounds a key file read; a real one is under 120 bytes.
const maxKeyFile = 1 << 10

// ReadPublicKeyFile reads and parses a public key file.
func ReadPublicKeyFile(path string) (PublicKey, error) {
	return readKeyFile(path, ParsePublicKey)
}

// ReadPrivateKeyFile reads and parses a private key file. Like ssh, it refuses a file that
// group or others may read or write: a signing key that leaked signs firmware for the fleet.
func ReadPrivateKeyFile(path string) (PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return PrivateKey{}, fmt.Errorf("private key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return PrivateKey{}, fmt.Errorf("%s: mode %04o, want 0600 (no access for group or others): %w", path, perm, ErrBadKey)
	}
	return readKeyFile(path, ParsePrivateKey)
}

// readKeyFile reads a key file of at most maxKeyFile bytes and parses it, naming the file
// in a parse error.
func readKeyFile[K any](path string, parse func([]byte) (K, error)) (K, error) {
	var none K
	f, err := os.Open(path)
	if err != nil {
		return none, fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return none, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return none, fmt.Errorf("%s: larger than %d bytes: %w", path, maxKeyFile, ErrBadKey)
	}
	k, err := parse(data)
	if err != nil {
		return none, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Package bundle reads and writes edgegate's signed firmware update bundles.
//
// A bundle is an uncompressed tar archive with exactly four regular files in this order:
//
//	manifest.json  what the bundle holds (board, version, build time, key ID, size and
//	               sha256 of each part, and optionally its security epoch and the next set
//	               of trusted keys), at most MaxManifestSize bytes
//	manifest.sig   the ed25519 signature of the exact manifest.json bytes
//	kernel         the kernel image
//	initramfs      the initramfs (gzip already, hence no compression around the archive)
//
// The manifest and signature come first so that a gateway refuses a bundle for another
// board, from an unknown key or with an old version before it writes a single byte of a
// slot; the parts are then checked against the signed sizes and digests while they stream.
package bundle

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// The errors a refused bundle wraps; callers branch on them with errors.Is. The wrapping
// message names the entry or field and the values involved.
var (
	ErrMalformed    = errors.New("malformed bundle")
	ErrUnknownKey   = errors.New("unknown signing key")
	ErrBadSignature = errors.New("bad signature")
	ErrWrongBoard   = errors.New("wrong board")
	ErrNotNewer     = errors.New("not newer than the running firmware")
	ErrBadDigest    = errors.New("part does not match the manifest")
	// ErrBelowFloor is a bundle whose security epoch is below the gateway's floor; Force
	// does not override it.
	ErrBelowFloor = errors.New("security epoch below the floor")
	// ErrBadKey is a key file that does not parse or does not match its key ID.
	ErrBadKey = errors.New("bad key file")
)

const (
	// Format is the manifest format this package reads and writes.
	Format = 1
	// MaxPartSize bounds the kernel and the initramfs: a gateway's slot is a few hundred
	// MiB and a declared size above that is refused before anything is written.
	MaxPartSize = 256 << 20
	// MaxManifestSize bounds manifest.json, which is read into memory before it is verified.
	MaxManifestSize = 4 << 10
	// MaxNextKeys bounds a manifest's next key set: a few keys (one in use, some held in
	// reserve) is what a rotation needs, and the manifest must stay under MaxManifestSize.
	MaxNextKeys = 8
)

// The archive entries, in the only order accepted.
const (
	EntryManifest  = "manifest.json"
	EntrySignature = "manifest.sig"
	EntryKernel    = "kernel"
	EntryInitramfs = "initramfs"
)

// Manifest is manifest.json.
type Manifest struct {
	Format    int       `json:"format"`
	Board     string    `json:"board"`
	Version   string    `json:"version"`
	BuildTime time.Time `json:"buildTime"`
	KeyID     string    `json:"keyID"`
	// SecurityEpoch orders bundles by their security fixes: a gateway never installs a
	// bundle whose epoch is below the highest one it has committed, not even with Force.
	// Absent is 0, which is what every bundle made before epochs existed carries; omitted
	// when 0 so that such a bundle's manifest stays readable by firmware that knows no epochs.
	SecurityEpoch uint64 `json:"securityEpoch,omitempty"`
	Kernel        Part   `json:"kernel"`
	Initramfs     Part   `json:"initramfs"`
	// NextKeys, when set, replaces the gateway's trusted keys once this firmware commits:
	// signed by a key trusted now, it retires the keys it does not list.
	NextKeys *KeySet `json:"nextKeys,omitempty"`
}

// KeySet is a generation of trusted signing keys. Generations only go up: a gateway adopts
// a set only when its generation is above the one it holds, so that an older bundle that
// carried an older set cannot bring retired keys back.
type KeySet struct {
	// Generation numbers the set across the fleet; the keys baked into the firmware are
	// generation 0, so a set in a manifest is 1 or more.
	Generation uint64 `json:"generation"`
	// Keys are public key lines as in a .pub file, without the newline.
	Keys []string `json:"keys"`
}

// NewKeySet is the set of keys with generation gen, as a manifest carries it.
func NewKeySet(gen uint64, keys []PublicKey) *KeySet {
	s := &KeySet{Generation: gen}
	for _, k := range keys {
		s.Keys = append(s.Keys, strings.TrimSuffix(string(k.Marshal()), "\n"))
	}
	return s
}

// PublicKeys parses the set's keys; errors name the field (the key by its index) and wrap
// ErrMalformed.
func (s KeySet) PublicKeys() ([]PublicKey, error) {
	if s.Generation == 0 {
		return nil, fmt.Errorf("generation: 0 is the firmware's own keys, a set is 1 or more: %w", ErrMalformed)
	}
	if len(s.Keys) == 0 || len(s.Keys) > MaxNextKeys {
		return nil, fmt.Errorf("keys: %d keys, want 1..%d: %w", len(s.Keys), MaxNextKeys, ErrMalformed)
	}
	keys := make([]PublicKey, 0, len(s.Keys))
	for i, line := range s.Keys {
		k, err := ParsePublicKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("keys[%d]: %w: %w", i, err, ErrMalformed)
		}
		if _, dup := findKey(keys, k.ID); dup {
			return nil, fmt.Errorf("keys[%d]: key %s listed twice: %w", i, k.ID, ErrMalformed)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Part is the size and lowercase hex sha256 of the kernel or the initramfs.
type Part struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var (
	boardName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hexKeyID  = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// decodeManifest decodes manifest.json strictly: unknown fields and trailing data are refused.
// It checks the syntax only; validate checks the values once the signature is known good.
func decodeManifest(data []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%s: %s: %w", EntryManifest, err, ErrMalformed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("%s: data after the JSON object: %w", EntryManifest, ErrMalformed)
	}
	return m, nil
}

// validate checks every field's value; errors name the field.
func (m Manifest) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s: %w", EntryManifest, field, fmt.Sprintf(format, args...), ErrMalformed)
	}
	if m.Format != Format {
		return bad("format", "%d, this firmware reads format %d", m.Format, Format)
	}
	if !boardName.MatchString(m.Board) {
		return bad("board", "%q is not a board name", m.Board)
	}
	if _, err := ParseVersion(m.Version); err != nil {
		return fmt.Errorf("%s: %w", EntryManifest, err)
	}
	if m.BuildTime.IsZero() {
		return bad("buildTime", "missing")
	}
	if !hexKeyID.MatchString(m.KeyID) {
		return bad("keyID", "%q is not 16 lowercase hex digits", m.KeyID)
	}
	for _, p := range []struct {
		name string
		part Part
	}{{"kernel", m.Kernel}, {"initramfs", m.Initramfs}} {
		if p.part.Size <= 0 || p.part.Size > MaxPartSize {
			return bad(p.name+".size", "%d is outside 1..%d", p.part.Size, MaxPartSize)
		}
		if !hexDigest.MatchString(p.part.SHA256) {
			return bad(p.name+".sha256", "%q is not 64 lowercase hex digits", p.part.SHA256)
		}
	}
	if m.NextKeys != nil {
		if _, err := m.NextKeys.PublicKeys(); err != nil {
			return fmt.Errorf("%s: nextKeys.%w", EntryManifest, err)
		}
	}
	return nil
}

// encode is the exact manifest.json a new bundle carries (and signs), indented so that a
// bundle unpacked with tar is readable.
func (m Manifest) encode() ([]byte, error) {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", EntryManifest, err)
	}
	return append(data, '\n'), nil
}

func hexSum(sum []byte) string { return hex.EncodeToString(sum) }

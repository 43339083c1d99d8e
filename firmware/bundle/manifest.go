// Package bundle reads and writes edgegate's signed firmware update bundles.
//
// A bundle is an uncompressed tar archive with exactly four regular files in this order:
//
//	manifest.json  what the bundle holds (board, version, build time, key ID, size and
//	               sha256 of each part), at most MaxManifestSize bytes
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
	Kernel    Part      `json:"kernel"`
	Initramfs Part      `json:"initramfs"`
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

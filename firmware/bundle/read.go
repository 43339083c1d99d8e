package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Policy is what a gateway accepts.
type Policy struct {
	// Board is this gateway's board; a bundle for another board is ErrWrongBoard.
	Board string
	// Keys are the trusted public keys (baked into the firmware).
	Keys []PublicKey
	// Running is the version of the running firmware. A bundle must be strictly newer
	// (Version.Compare): re-installing the running version is refused like a downgrade,
	// because a fleet rollout that repeats an update must be a no-op, not a reboot.
	Running string
	// Force accepts a bundle that is not newer (a downgrade, a reinstall, or a running
	// version that does not parse, such as a development build's "dev"). It does not
	// override the board, the key, the signature, the digests or MinEpoch.
	Force bool
	// MinEpoch is the gateway's security epoch floor: a bundle with a lower SecurityEpoch
	// is ErrBelowFloor, whatever Force says.
	MinEpoch uint64
}

// maxTrailer is how much may follow the end-of-archive marker: zero padding up to one
// 10 KiB record, which GNU tar writes; Create writes none.
const maxTrailer = 10 << 10

// Reader is a bundle being read. Open has verified its manifest and signature; CopyKernel
// and then CopyInitramfs stream the parts. A part is only good when its Copy returned nil:
// on an error the caller must discard whatever that Copy wrote (the writer may have been
// given bytes before the digest or a later part turned out wrong). The bundle as a whole
// is good only when CopyInitramfs returned nil.
type Reader struct {
	src      *countingReader
	tr       *tar.Reader
	raw, sig []byte
	manifest Manifest
	next     string // the entry the next Copy must read, "" when done
	err      error  // sticky: once anything failed, every later call returns it
}

// Open reads the manifest and signature from r and checks them against p: the key must be
// trusted, the signature good, the manifest well-formed, the board p.Board, the security
// epoch at least p.MinEpoch and the version newer than p.Running unless p.Force. Nothing of the parts has been read when it returns.
func Open(r io.Reader, p Policy) (*Reader, error) {
	if !boardName.MatchString(p.Board) {
		return nil, fmt.Errorf("policy: board %q is not a board name", p.Board)
	}
	if len(p.Keys) == 0 {
		return nil, fmt.Errorf("policy: no trusted keys")
	}
	src := &countingReader{r: r}
	b := &Reader{src: src, tr: tar.NewReader(src), next: EntryKernel}
	raw, err := b.readSmall(EntryManifest, MaxManifestSize)
	if err != nil {
		return nil, err
	}
	sig, err := b.readSmall(EntrySignature, ed25519.SignatureSize)
	if err != nil {
		return nil, err
	}
	m, err := VerifyManifest(raw, sig, p.Keys)
	if err != nil {
		return nil, err
	}
	if m.Board != p.Board {
		return nil, fmt.Errorf("bundle is for board %s, this gateway is %s: %w", m.Board, p.Board, ErrWrongBoard)
	}
	if err := CheckEpoch(m, p.MinEpoch); err != nil {
		return nil, err
	}
	if !p.Force {
		if err := checkNewer(m.Version, p.Running); err != nil {
			return nil, err
		}
	}
	b.raw, b.sig, b.manifest = raw, sig, m
	return b, nil
}

// VerifyManifest checks a manifest.json and its manifest.sig against the trusted keys and
// returns the manifest: what a gateway does with a slot's stored manifest before it boots
// that slot, as Open does with a bundle's.
func VerifyManifest(raw, sig []byte, keys []PublicKey) (Manifest, error) {
	if len(sig) != ed25519.SignatureSize {
		return Manifest{}, fmt.Errorf("%s: %d bytes, want %d: %w", EntrySignature, len(sig), ed25519.SignatureSize, ErrMalformed)
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return Manifest{}, err
	}
	key, ok := findKey(keys, m.KeyID)
	if !ok {
		return Manifest{}, fmt.Errorf("bundle is signed with key %q, this gateway trusts %s: %w", m.KeyID, keyIDs(keys), ErrUnknownKey)
	}
	if !ed25519.Verify(key.Key, raw, sig) {
		return Manifest{}, fmt.Errorf("%s does not verify %s with key %s: %w", EntrySignature, EntryManifest, key.ID, ErrBadSignature)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// CheckEpoch refuses a manifest whose security epoch is below floor, naming both.
func CheckEpoch(m Manifest, floor uint64) error {
	if m.SecurityEpoch < floor {
		return fmt.Errorf("bundle %s has security epoch %d, below this gateway's floor %d (the highest epoch it committed); force does not override it: %w",
			m.Version, m.SecurityEpoch, floor, ErrBelowFloor)
	}
	return nil
}

func checkNewer(bundle, running string) error {
	rv, err := ParseVersion(running)
	if err != nil {
		return fmt.Errorf("running firmware (only Force installs over it): %w", err)
	}
	bv, err := ParseVersion(bundle)
	if err != nil {
		return err // validate parsed it already
	}
	switch bv.Compare(rv) {
	case 0:
		return fmt.Errorf("bundle version %s is the running version %s (a reinstall needs Force): %w", bundle, running, ErrNotNewer)
	case -1:
		return fmt.Errorf("bundle version %s is older than the running version %s (a downgrade needs Force): %w", bundle, running, ErrNotNewer)
	}
	return nil
}

func findKey(keys []PublicKey, id string) (PublicKey, bool) {
	for _, k := range keys {
		if k.ID == id {
			return k, true
		}
	}
	return PublicKey{}, false
}

func keyIDs(keys []PublicKey) string {
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.ID)
	}
	return b.String()
}

// Manifest is the verified manifest.
func (b *Reader) Manifest() Manifest { return b.manifest }

// RawManifest is the exact signed manifest.json, for a caller that records what it installed.
func (b *Reader) RawManifest() []byte { return bytes.Clone(b.raw) }

// Signature is manifest.sig, the signature of RawManifest.
func (b *Reader) Signature() []byte { return bytes.Clone(b.sig) }

// CopyKernel streams the kernel to w and checks its size and sha256 against the manifest.
func (b *Reader) CopyKernel(w io.Writer) (int64, error) {
	return b.copyPart(EntryKernel, b.manifest.Kernel, w)
}

// CopyInitramfs streams the initramfs to w after CopyKernel, checks it like the kernel, and
// checks that the archive ends there.
func (b *Reader) CopyInitramfs(w io.Writer) (int64, error) {
	n, err := b.copyPart(EntryInitramfs, b.manifest.Initramfs, w)
	if err != nil {
		return n, err
	}
	if err := b.end(); err != nil {
		b.err = err
		return n, err
	}
	return n, nil
}

func (b *Reader) copyPart(name string, want Part, w io.Writer) (int64, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.next != name {
		return 0, fmt.Errorf("read %s: the next entry to read is %q (kernel, then initramfs)", name, b.next)
	}
	n, err := b.streamPart(name, want, w)
	if err != nil {
		b.err = err
		return n, err
	}
	b.next = ""
	if name == EntryKernel {
		b.next = EntryInitramfs
	}
	return n, nil
}

func (b *Reader) streamPart(name string, want Part, w io.Writer) (int64, error) {
	hdr, err := b.header(name)
	if err != nil {
		return 0, err
	}
	// The tar header's size is unsigned; the manifest's is signed. Refusing a difference
	// before copying keeps a forged header from streaming more than was signed.
	if hdr.Size != want.Size {
		return 0, fmt.Errorf("%s: archive entry is %d bytes, manifest says %d: %w", name, hdr.Size, want.Size, ErrBadDigest)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), readerOnly{b.tr})
	if err != nil {
		if errors.Is(err, errSource) {
			return n, fmt.Errorf("%s: after %d of %d bytes: %w", name, n, want.Size, err)
		}
		return n, fmt.Errorf("%s: write: %w", name, err)
	}
	if n != want.Size {
		return n, fmt.Errorf("%s: %d bytes, manifest says %d: %w", name, n, want.Size, ErrBadDigest)
	}
	if got := hexSum(h.Sum(nil)); got != want.SHA256 {
		return n, fmt.Errorf("%s: sha256 %s, manifest says %s: %w", name, got, want.SHA256, ErrBadDigest)
	}
	return n, nil
}

// errSource marks read errors so that streamPart can tell them from the caller's writer's.
var errSource = errors.New("read bundle")

// readerOnly hides the tar reader's WriteTo (it has none today) and tags its errors: io.Copy
// reports read and write errors alike, and a truncated bundle must be ErrMalformed while the
// caller's disk error stays the caller's.
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w: %w", errSource, err, ErrMalformed)
	}
	return n, err
}

// readSmall reads a whole entry that must be at most max bytes into memory.
func (b *Reader) readSmall(name string, max int64) ([]byte, error) {
	hdr, err := b.header(name)
	if err != nil {
		return nil, err
	}
	if hdr.Size > max {
		return nil, fmt.Errorf("%s: %d bytes, at most %d allowed: %w", name, hdr.Size, max, ErrMalformed)
	}
	data, err := io.ReadAll(b.tr)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", name, err, ErrMalformed)
	}
	return data, nil
}

// header reads the next entry's header, which must be the regular file name.
func (b *Reader) header(name string) (*tar.Header, error) {
	hdr, err := b.tr.Next()
	switch {
	case err == io.EOF:
		return nil, fmt.Errorf("archive ends where %s should be: %w", name, ErrMalformed)
	case err != nil:
		return nil, fmt.Errorf("archive header for %s: %s: %w", name, err, ErrMalformed)
	case hdr.Name != name:
		return nil, fmt.Errorf("archive entry %q where %s should be (order: %s, %s, %s, %s): %w",
			truncate(hdr.Name, 64), name, EntryManifest, EntrySignature, EntryKernel, EntryInitramfs, ErrMalformed)
	case hdr.Typeflag != tar.TypeReg:
		return nil, fmt.Errorf("archive entry %s: type %q, want a regular file: %w", name, hdr.Typeflag, ErrMalformed)
	}
	return hdr, nil
}

// end checks that nothing follows the initramfs but the end-of-archive marker (two zero
// blocks) and padding. archive/tar reports a stream that simply stops after the last entry
// as a clean end too, so the marker is checked by counting what it consumed.
func (b *Reader) end() error {
	pad := (blockSize - b.manifest.Initramfs.Size%blockSize) % blockSize
	wantEnd := b.src.n + pad + 2*blockSize
	hdr, err := b.tr.Next()
	switch {
	case err == nil:
		return fmt.Errorf("archive entry %q after %s, which must be last: %w", truncate(hdr.Name, 64), EntryInitramfs, ErrMalformed)
	case err != io.EOF:
		return fmt.Errorf("archive end: %s: %w", err, ErrMalformed)
	case b.src.n != wantEnd:
		return fmt.Errorf("archive end: truncated end-of-archive marker (%d of %d bytes): %w",
			max(b.src.n-(wantEnd-2*blockSize), 0), 2*blockSize, ErrMalformed)
	}
	rest, err := io.ReadAll(io.LimitReader(b.src, maxTrailer-2*blockSize+1))
	if err != nil {
		return fmt.Errorf("archive end: %s: %w", err, ErrMalformed)
	}
	if len(rest) > maxTrailer-2*blockSize || bytes.Count(rest, []byte{0}) != len(rest) {
		return fmt.Errorf("archive end: data after the end-of-archive marker: %w", ErrMalformed)
	}
	return nil
}

const blockSize = 512

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

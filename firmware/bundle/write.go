package bundle

import (
	"archive/tar"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"time"
)

// Release is what the builder says about a bundle; Create adds the rest of the manifest.
type Release struct {
	Board     string
	Version   string
	BuildTime time.Time
	// SecurityEpoch is the manifest's; raise it with a fix that older bundles must not undo.
	SecurityEpoch uint64
	// NextKeys, when set, become the gateways' trusted keys once this firmware commits.
	NextKeys *KeySet
}

// Create writes a bundle of kernel and initramfs signed with key to w and returns its
// manifest. Each part is read twice, once for the manifest's size and digest and once into
// the archive; a part that changed in between is an error. On an error, what was written to
// w is not a bundle and must be discarded.
func Create(w io.Writer, rel Release, kernel, initramfs io.ReadSeeker, key PrivateKey) (Manifest, error) {
	m := Manifest{
		Format:    Format,
		Board:     rel.Board,
		Version:   rel.Version,
		BuildTime: rel.BuildTime.UTC().Truncate(time.Second),
		KeyID:     key.ID,
		// Signed with the rest: neither can be changed without the signing key.
		SecurityEpoch: rel.SecurityEpoch,
		NextKeys:      rel.NextKeys,
	}
	if len(key.Key) != ed25519.PrivateKeySize || KeyID(key.Public().Key) != key.ID {
		return Manifest{}, fmt.Errorf("signing key %q: %w", key.ID, ErrBadKey)
	}
	var err error
	if m.Kernel, err = measure(EntryKernel, kernel); err != nil {
		return Manifest{}, err
	}
	if m.Initramfs, err = measure(EntryInitramfs, initramfs); err != nil {
		return Manifest{}, err
	}
	// The writer refuses what a reader would refuse, so a bad release fails at build time.
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	raw, err := m.encode()
	if err != nil {
		return Manifest{}, err
	}
	if len(raw) > MaxManifestSize {
		return Manifest{}, fmt.Errorf("%s: %d bytes, at most %d allowed: %w", EntryManifest, len(raw), MaxManifestSize, ErrMalformed)
	}
	sig := ed25519.Sign(key.Key, raw)

	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		size int64
		copy func(io.Writer) error
	}{
		{EntryManifest, int64(len(raw)), writeBytes(EntryManifest, raw)},
		{EntrySignature, int64(len(sig)), writeBytes(EntrySignature, sig)},
		{EntryKernel, m.Kernel.Size, copyPart(EntryKernel, kernel, m.Kernel)},
		{EntryInitramfs, m.Initramfs.Size, copyPart(EntryInitramfs, initramfs, m.Initramfs)},
	} {
		// Fixed metadata: the same inputs and build time make the same bundle.
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     e.name,
			Size:     e.size,
			Mode:     0o644,
			ModTime:  m.BuildTime,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return Manifest{}, fmt.Errorf("write %s header: %w", e.name, err)
		}
		if err := e.copy(tw); err != nil {
			return Manifest{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Manifest{}, fmt.Errorf("write archive end: %w", err)
	}
	return m, nil
}

// CreateFiles is Create with the parts read from files.
func CreateFiles(w io.Writer, rel Release, kernelPath, initramfsPath string, key PrivateKey) (Manifest, error) {
	kernel, err := os.Open(kernelPath)
	if err != nil {
		return Manifest{}, fmt.Errorf("kernel: %w", err)
	}
	defer kernel.Close()
	initramfs, err := os.Open(initramfsPath)
	if err != nil {
		return Manifest{}, fmt.Errorf("initramfs: %w", err)
	}
	defer initramfs.Close()
	return Create(w, rel, kernel, initramfs, key)
}

func measure(name string, r io.ReadSeeker) (Part, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return Part{}, fmt.Errorf("%s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, MaxPartSize+1))
	if err != nil {
		return Part{}, fmt.Errorf("%s: %w", name, err)
	}
	if n == 0 || n > MaxPartSize {
		return Part{}, fmt.Errorf("%s: size %s is outside 1..%d bytes: %w", name, sizeString(n), MaxPartSize, ErrMalformed)
	}
	return Part{Size: n, SHA256: hexSum(h.Sum(nil))}, nil
}

func sizeString(n int64) string {
	if n > MaxPartSize {
		return fmt.Sprintf("above %d", MaxPartSize)
	}
	return fmt.Sprint(n)
}

func writeBytes(name string, data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
}

func copyPart(name string, r io.ReadSeeker, want Part) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, want.Size))
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if got := hexSum(h.Sum(nil)); n != want.Size || got != want.SHA256 {
			return fmt.Errorf("%s changed while the bundle was written (%d bytes, sha256 %s; measured %d bytes, sha256 %s)",
				name, n, got, want.Size, want.SHA256)
		}
		return nil
	}
}

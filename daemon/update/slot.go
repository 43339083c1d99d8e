package update

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
	"golang.org/x/sys/unix"
)

// The slot's files: how a bundle is written into a slot, read back and verified again.
// writeSlot streams the bundle's parts into temporary files in the slot, reads them back,
// and only then replaces the slot's firmware.
func writeSlot(root string, slot layout.Slot, br *bundle.Reader, man bundle.Manifest) error {
	dir := filepath.Join(root, slot.Dir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := removeTemps(root, slot); err != nil {
		return err
	}
	parts := []struct {
		name string
		want bundle.Part
		copy func(io.Writer) (int64, error)
	}{
		{layout.KernelFile, man.Kernel, br.CopyKernel},
		{layout.InitramfsFile, man.Initramfs, br.CopyInitramfs},
	}
	for _, p := range parts {
		if err := writeTemp(filepath.Join(dir, p.name+tempSuffix), p.copy); err != nil {
			return err
		}
	}
	// Read back from the disk, not the page cache: what boots is what is on the disk.
	for _, p := range parts {
		if err := checkFile(filepath.Join(dir, p.name+tempSuffix), p.want, true); err != nil {
			return fmt.Errorf("read back: %w", err)
		}
	}
	// Only now does the slot's old firmware go, its entry first: a half-replaced slot never
	// boots, and a bundle that failed above left the slot as it was.
	entries, _, err := readEntries(root)
	if err != nil {
		return err
	}
	var stale []string
	for _, e := range entries {
		if e.entry.Slot == slot {
			stale = append(stale, e.file)
		}
	}
	if err := removeSync(filepath.Join(root, layout.EntriesDir), stale...); err != nil {
		return fmt.Errorf("removing slot %s's boot entry: %w", slot, err)
	}
	for _, p := range parts {
		if err := os.Rename(filepath.Join(dir, p.name+tempSuffix), filepath.Join(dir, p.name)); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, layout.ManifestFile), br.RawManifest(), 0o644); err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, layout.SignatureFile), br.Signature(), 0o644)
}

// tempSuffix marks a part being written.
const tempSuffix = ".new"

// removeTemps removes what an interrupted write left in the slot.
func removeTemps(root string, slot layout.Slot) error {
	dir := filepath.Join(root, slot.Dir())
	return removeSync(dir, layout.KernelFile+tempSuffix, layout.InitramfsFile+tempSuffix)
}

// writeTemp creates file, lets copy fill it and syncs it.
func writeTemp(file string, copy func(io.Writer) (int64, error)) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := copy(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	return f.Close()
}

// checkFile compares a file's size and sha256 with the manifest's. fromDisk first drops
// the file's cached pages (after a sync they are clean), so the read comes from the disk.
func checkFile(file string, want bundle.Part, fromDisk bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if fromDisk {
		// Advisory: where it is not supported the read comes from the cache, which the
		// sync already wrote to the disk.
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != want.Size || got != want.SHA256 {
		return fmt.Errorf("%s: %d bytes sha256 %s on the disk, the manifest says %d bytes sha256 %s: %w",
			strings.TrimSuffix(filepath.Base(file), tempSuffix), n, got, want.Size, want.SHA256, bundle.ErrBadDigest)
	}
	return nil
}

// verifySlot checks a slot's stored manifest against the keys and its files against the
// manifest.
func verifySlot(root string, slot layout.Slot, keys []bundle.PublicKey) (bundle.Manifest, error) {
	man, err := readSlotManifest(root, slot, keys)
	if err != nil {
		return bundle.Manifest{}, err
	}
	if err := checkFile(filepath.Join(root, slot.File(layout.KernelFile)), man.Kernel, false); err != nil {
		return man, err
	}
	return man, checkFile(filepath.Join(root, slot.File(layout.InitramfsFile)), man.Initramfs, false)
}

// progressReader counts what was read of a bundle for Status, and stops at ctx's end.
type progressReader struct {
	ctx context.Context
	r   io.Reader
	m   *Manager
	a   *Attempt
	n   int64
	// reported is n at the last change notification.
	reported int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.m.mu.Lock()
	p.a.Bytes = p.n
	p.m.mu.Unlock()
	// The dashboard hears of it every MiB.
	if p.n-p.reported >= 1<<20 {
		p.reported = p.n
		p.m.changed()
	}
	return n, err
}

// LoadKeys reads the trusted public keys from dir (layout.KeysDir): every *.pub file. A
// missing directory is no keys; a key file that does not parse is an error naming it.
func LoadKeys(dir string) ([]bundle.PublicKey, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.pub"))
	if err != nil {
		return nil, err
	}
	var keys []bundle.PublicKey
	for _, f := range files {
		k, err := bundle.ReadPublicKeyFile(f)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", f, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

package qemu

import (
	"crypto/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/image"
)

// rotateKeys bundles the qemu-x86_64 releases again for the anti-rollback steps: v1.1.0,
// signed by the key every release bakes in, carries security epoch 1 and the next key set
// (generation 1: a new key only); the later releases carry epoch 1 and are signed by the
// new key alone. Their firmware still bakes in only the old key: what they trust after
// v1.1.0 committed comes from the trust record.
func (u *releases) rotateKeys(t *testing.T) {
	t.Helper()
	var err error
	if _, u.next, err = bundle.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		version string
		rel     bundle.Release
		key     bundle.PrivateKey
	}{
		{"v1.1.0", bundle.Release{SecurityEpoch: 1, NextKeys: bundle.NewKeySet(1, []bundle.PublicKey{u.next.Public()})}, u.priv},
		{"v1.2.0-unhealthy", bundle.Release{SecurityEpoch: 1}, u.next},
		{"v1.3.0", bundle.Release{SecurityEpoch: 1}, u.next},
		{"v1.2.0-panics", bundle.Release{SecurityEpoch: 1}, u.next}, // the power-cut matrix's
	} {
		kernel, initramfs := extractParts(t, u.bundles[r.version], u.pub, filepath.Join(u.dir, "rotate-"+r.version))
		r.rel.Board, r.rel.Version = u.board.Name, r.version
		u.bundles[r.version] = u.makeRelease(t, r.rel, kernel, initramfs, r.key)
	}
}

// antiRollback runs after v1.1.0 committed (and again after a release rolled back to it):
// the trust record says epoch 1 and the new key, and forced uploads of a bundle signed with
// the retired key and of one below the floor are refused with their reason, the ESP
// untouched.
func (u *updateTest) antiRollback(t *testing.T) {
	st := u.status(t)
	if tr := st.Trust; tr.SecurityEpochFloor != 1 || tr.KeyGeneration != 1 || !slices.Equal(tr.Keys, []string{u.next.ID}) {
		t.Fatalf("trust on slot %s (%s): %+v, want floor 1, generation 1, key %s", st.Slot, st.Version, tr, u.next.ID)
	}
	esp, err := image.OpenESP(u.disk)
	if err != nil {
		t.Fatal(err)
	}
	before := espDigest(u.ctx, t, esp)
	kernel, initramfs := extractParts(t, u.bundles["v1.0.0"], u.pub, filepath.Join(u.dir, "old-parts"))
	belowFloor := u.makeRelease(t, bundle.Release{Board: u.board.Name, Version: "v1.0.0"}, kernel, initramfs, u.next)
	u.expectRefused(t, esp, before, "?force=1", []refusedBundle{
		{"retired key", u.bundles["v1.0.0"], "unknown signing key"},
		{"below the floor", belowFloor, "security epoch 0, below this gateway's floor 1"},
	})
}

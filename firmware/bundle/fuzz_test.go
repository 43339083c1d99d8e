package bundle

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzOpen feeds arbitrary archives to the gateway's side. The seed is a valid bundle, so the
// fuzzer mutates a signed one; whatever it makes, nothing panics, every refusal is one of the
// sentinels, and an accepted bundle's parts match its signed manifest.
func FuzzOpen(f *testing.F) {
	f.Add(makeBundle(f, testRelease(), testKey(1)))
	// One with an epoch and a next key set, so that the fuzzer mutates those fields too.
	rel := testRelease()
	rel.SecurityEpoch = 2
	rel.NextKeys = NewKeySet(1, []PublicKey{testKey(3).Public()})
	f.Add(makeBundle(f, rel, testKey(1)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := testPolicy()
		p.Force = true // so that the fuzzer's mutations of the version get as far as the parts
		p.MinEpoch = 1 // the epoch 0 seed is refused at its epoch, the epoch 2 one read through
		m, kernel, initramfs, err := readBundle(bytes.NewReader(data), p)
		if err != nil {
			for _, s := range []error{ErrMalformed, ErrUnknownKey, ErrBadSignature, ErrWrongBoard, ErrBadDigest, ErrBelowFloor} {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("refusal without a sentinel: %v", err)
		}
		if sha(kernel) != m.Kernel.SHA256 || int64(len(kernel)) != m.Kernel.Size ||
			sha(initramfs) != m.Initramfs.SHA256 || int64(len(initramfs)) != m.Initramfs.Size {
			t.Fatalf("accepted parts that do not match the manifest %+v", m)
		}
		if m.SecurityEpoch < p.MinEpoch {
			t.Fatalf("accepted epoch %d below the floor %d", m.SecurityEpoch, p.MinEpoch)
		}
		if m.NextKeys != nil {
			if _, err := m.NextKeys.PublicKeys(); err != nil {
				t.Fatalf("accepted a manifest whose next keys do not parse: %v", err)
			}
		}
		// Accepted means the archive ended after the initramfs: anything appended is refused.
		if _, _, _, err := readBundle(io.MultiReader(bytes.NewReader(data), bytes.NewReader([]byte{1})), p); !errors.Is(err, ErrMalformed) {
			t.Fatalf("accepted bundle plus one byte: %v", err)
		}
	})
}

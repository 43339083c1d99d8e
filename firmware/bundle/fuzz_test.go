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
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := testPolicy()
		p.Force = true // so that the fuzzer's mutations of the version get as far as the parts
		m, kernel, initramfs, err := readBundle(bytes.NewReader(data), p)
		if err != nil {
			for _, s := range []error{ErrMalformed, ErrUnknownKey, ErrBadSignature, ErrWrongBoard, ErrBadDigest} {
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
		// Accepted means the archive ended after the initramfs: anything appended is refused.
		if _, _, _, err := readBundle(io.MultiReader(bytes.NewReader(data), bytes.NewReader([]byte{1})), p); !errors.Is(err, ErrMalformed) {
			t.Fatalf("accepted bundle plus one byte: %v", err)
		}
	})
}

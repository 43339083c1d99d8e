package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// signedBundle is a hand-made bundle of m, signed with key however wrong m is.
func signedBundle(t *testing.T, m Manifest, key PrivateKey) []byte {
	t.Helper()
	raw, sig := signed(t, m, key)
	return writeTar(t,
		entry{name: EntryManifest, typeflag: tar.TypeReg, data: raw},
		entry{name: EntrySignature, typeflag: tar.TypeReg, data: sig},
		entry{name: EntryKernel, typeflag: tar.TypeReg, data: testKernel},
		entry{name: EntryInitramfs, typeflag: tar.TypeReg, data: testInitramfs})
}

func TestEpochSignedAndRead(t *testing.T) {
	rel := testRelease()
	rel.SecurityEpoch = 3
	data := makeBundle(t, rel, testKey(1))
	p := testPolicy()
	p.MinEpoch = 3
	m, _, _, err := readBundle(bytes.NewReader(data), p)
	if err != nil {
		t.Fatalf("epoch 3 at floor 3: %v", err)
	}
	if m.SecurityEpoch != 3 {
		t.Errorf("read epoch %d, want 3", m.SecurityEpoch)
	}
	b, _ := Open(bytes.NewReader(data), p)
	if raw := string(b.RawManifest()); !strings.Contains(raw, `"securityEpoch": 3`) {
		t.Errorf("the signed manifest lacks the epoch:\n%s", raw)
	}

	// Below the floor: refused, Force or not, and the error names both epochs.
	for _, force := range []bool{false, true} {
		p.MinEpoch, p.Force = 4, force
		_, err := Open(bytes.NewReader(data), p)
		refusal(t, err, ErrBelowFloor, "security epoch 3", "floor 4", "force does not override it")
	}

	// The epoch is signed: raising it in the manifest breaks the signature.
	forged := bytes.Replace(data, []byte(`"securityEpoch": 3`), []byte(`"securityEpoch": 9`), 1)
	if bytes.Equal(forged, data) {
		t.Fatal("the test did not find the epoch in the archive")
	}
	p.MinEpoch = 0
	_, err = Open(bytes.NewReader(forged), p)
	refusal(t, err, ErrBadSignature)
}

// TestEpochZeroIsTheOldFormat: a bundle without an epoch is byte for byte what firmware
// from before epochs wrote and reads (its strict decoder refuses unknown fields), and a
// manifest without the field reads as epoch 0.
func TestEpochZeroIsTheOldFormat(t *testing.T) {
	b, err := Open(bytes.NewReader(makeBundle(t, testRelease(), testKey(1))), testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	raw := string(b.RawManifest())
	if strings.Contains(raw, "securityEpoch") || strings.Contains(raw, "nextKeys") {
		t.Errorf("an epoch 0 bundle without next keys names them:\n%s", raw)
	}
	if b.Manifest().SecurityEpoch != 0 || b.Manifest().NextKeys != nil {
		t.Errorf("manifest %+v", b.Manifest())
	}
	p := testPolicy()
	p.MinEpoch = 1
	_, err = Open(bytes.NewReader(makeBundle(t, testRelease(), testKey(1))), p)
	refusal(t, err, ErrBelowFloor, "security epoch 0", "floor 1")
}

func TestNextKeysSignedAndRead(t *testing.T) {
	next := []PublicKey{testKey(3).Public(), testKey(4).Public()}
	rel := testRelease()
	rel.NextKeys = NewKeySet(2, next)
	data := makeBundle(t, rel, testKey(1))
	m, _, _, err := readBundle(bytes.NewReader(data), testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if m.NextKeys == nil || m.NextKeys.Generation != 2 {
		t.Fatalf("next keys read as %+v", m.NextKeys)
	}
	got, err := m.NextKeys.PublicKeys()
	if err != nil || len(got) != 2 || got[0].ID != next[0].ID || !got[1].Key.Equal(next[1].Key) {
		t.Fatalf("next keys %v %v, want %v", got, err, next)
	}
	// Signed: swapping a key for the attacker's breaks the signature.
	mine := testKey(9).Public()
	forged := bytes.Replace(data, []byte(strings.TrimSuffix(string(next[1].Marshal()), "\n")),
		[]byte(strings.TrimSuffix(string(mine.Marshal()), "\n")), 1)
	if bytes.Equal(forged, data) {
		t.Fatal("the test did not find the key in the archive")
	}
	_, err = Open(bytes.NewReader(forged), testPolicy())
	refusal(t, err, ErrBadSignature)
}

func TestNextKeysRefused(t *testing.T) {
	k := testKey(3).Public()
	line := strings.TrimSuffix(string(k.Marshal()), "\n")
	var many []PublicKey
	for i := range MaxNextKeys + 1 {
		many = append(many, testKey(byte(10+i)).Public())
	}
	for _, tc := range []struct {
		name string
		set  *KeySet
		want string
	}{
		{"generation 0", &KeySet{Generation: 0, Keys: []string{line}}, "nextKeys.generation: 0"},
		{"no keys", &KeySet{Generation: 1}, "nextKeys.keys: 0 keys, want 1..8"},
		{"too many", NewKeySet(1, many), "nextKeys.keys: 9 keys"},
		{"duplicate", &KeySet{Generation: 1, Keys: []string{line, line}}, "nextKeys.keys[1]: key " + k.ID + " listed twice"},
		{"not a key", &KeySet{Generation: 1, Keys: []string{line, "hello"}}, "nextKeys.keys[1]"},
		{"wrong key ID", &KeySet{Generation: 1, Keys: []string{strings.Replace(line, k.ID, testKey(4).ID, 1)}}, "nextKeys.keys[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The writer refuses it, and a reader refuses one signed anyway.
			rel := testRelease()
			rel.NextKeys = tc.set
			var buf bytes.Buffer
			_, err := Create(&buf, rel, bytes.NewReader(testKernel), bytes.NewReader(testInitramfs), testKey(1))
			refusal(t, err, ErrMalformed, tc.want)
			m := goodManifest()
			m.NextKeys = tc.set
			_, err = Open(bytes.NewReader(signedBundle(t, m, testKey(1))), testPolicy())
			refusal(t, err, ErrMalformed, tc.want)
		})
	}
}

func TestEpochStrictJSON(t *testing.T) {
	m := goodManifest()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, value string }{
		{"negative", "-1"}, {"fraction", "1.5"}, {"string", `"3"`}, {"too large", "18446744073709551616"},
	} {
		bad := strings.Replace(string(raw), `"format":1`, `"format":1,"securityEpoch":`+tc.value, 1)
		sig := ed25519.Sign(testKey(1).Key, []byte(bad))
		if _, err := VerifyManifest([]byte(bad), sig, testPolicy().Keys); !errors.Is(err, ErrMalformed) {
			t.Errorf("securityEpoch %s: %v, want ErrMalformed", tc.value, err)
		}
	}
}

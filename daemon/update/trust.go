package update

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// The trust record: the security epoch floor and the trusted key set. A committed firmware
// raises it; it never goes down. It lives outside the A/B slots, twice: on the data
// partition and on the ESP, both written at every change, and read both at start, the
// stricter winning, so that an older slot booted after a fallback, a wiped data partition
// or a damaged copy cannot lower the floor or bring a retired key back.

// trustRecord is the trust record as it is stored.
type trustRecord struct {
	Format int `json:"format"`
	// SecurityEpochFloor is the highest security epoch a committed firmware carried.
	SecurityEpochFloor uint64 `json:"securityEpochFloor"`
	// TrustedKeys is the key set a committed firmware rotated to; nil while none did, and
	// the running firmware's baked-in keys (generation 0) are trusted.
	TrustedKeys *bundle.KeySet `json:"trustedKeys,omitempty"`
}

const (
	trustFormat = 1
	trustFile   = "trust.json"
	// maxTrustFile bounds a read: a record is well under 2 KiB (bundle.MaxNextKeys keys).
	maxTrustFile = 16 << 10
)

func (t trustRecord) generation() uint64 {
	if t.TrustedKeys == nil {
		return 0
	}
	return t.TrustedKeys.Generation
}

func (t trustRecord) same(o trustRecord) bool {
	if t.SecurityEpochFloor != o.SecurityEpochFloor || t.generation() != o.generation() {
		return false
	}
	return t.TrustedKeys == nil || slices.Equal(t.TrustedKeys.Keys, o.TrustedKeys.Keys)
}

// stricter merges two records: the higher floor, the newer key generation. Two different
// sets of one generation (only damage or tampering makes them) leave the keys both trust.
func stricter(a, b trustRecord) trustRecord {
	r := trustRecord{Format: trustFormat, SecurityEpochFloor: max(a.SecurityEpochFloor, b.SecurityEpochFloor)}
	switch ga, gb := a.generation(), b.generation(); {
	case ga > gb:
		r.TrustedKeys = a.TrustedKeys
	case gb > ga:
		r.TrustedKeys = b.TrustedKeys
	case ga > 0:
		both := &bundle.KeySet{Generation: ga}
		for _, k := range a.TrustedKeys.Keys {
			if slices.Contains(b.TrustedKeys.Keys, k) {
				both.Keys = append(both.Keys, k)
			}
		}
		r.TrustedKeys = both
	}
	return r
}

// keys are the keys the record trusts; baked are the running firmware's own.
func (t trustRecord) keys(baked []bundle.PublicKey) ([]bundle.PublicKey, error) {
	if t.TrustedKeys == nil {
		return baked, nil
	}
	keys, err := t.TrustedKeys.PublicKeys()
	if err != nil {
		return nil, fmt.Errorf("trustedKeys.%w", err)
	}
	return keys, nil
}

// trustCopy is one of the two places of the record.
type trustCopy struct {
	where string // for logs: "data partition", "EFI system partition"
	path  string
	esp   bool // written through ESP.Writable
}

func (m *Manager) trustCopies() []trustCopy {
	var cs []trustCopy
	if m.opts.StateDir != "" {
		cs = append(cs, trustCopy{"data partition", filepath.Join(m.opts.StateDir, trustFile), false})
	}
	if m.opts.ESP != nil {
		cs = append(cs, trustCopy{"EFI system partition", filepath.Join(m.opts.ESP.Root(), layout.TrustPath), true})
	}
	return cs
}

// readTrust reads one copy; a missing one is fs.ErrNotExist, one that does not parse or
// holds keys that do not an error naming the file and the field.
func readTrust(path string) (trustRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return trustRecord{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTrustFile+1))
	if err != nil {
		return trustRecord{}, err
	}
	if len(b) > maxTrustFile {
		return trustRecord{}, fmt.Errorf("%s: larger than %d bytes", path, maxTrustFile)
	}
	var t trustRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return trustRecord{}, fmt.Errorf("%s: %w", path, err)
	}
	if t.Format != trustFormat {
		return trustRecord{}, fmt.Errorf("%s: format %d, this firmware reads %d", path, t.Format, trustFormat)
	}
	if _, err := t.keys(nil); err != nil {
		return trustRecord{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// writeTrust writes t to every copy; a failed copy is logged and left to the repair at the
// next start, which takes the other.
func (m *Manager) writeTrust(t trustRecord, copies []trustCopy) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		m.opts.Log.Error("encoding the trust record failed", "err", err)
		return
	}
	b = append(b, '\n')
	for _, c := range copies {
		write := func() error { return writeFileSync(c.path, b, 0o644) }
		if c.esp {
			err = m.opts.ESP.Writable(write)
		} else {
			err = write()
		}
		if err != nil {
			m.opts.Log.Error("writing the trust record failed", "where", c.where, "file", c.path, "err", err)
		}
	}
}

// loadTrust reads both copies, takes the stricter and repairs a copy that is missing,
// damaged or weaker. It returns a problem, which makes updates unavailable, when no copy
// can be read though one exists (the floor is unknown), or when the record trusts no key.
func (m *Manager) loadTrust() string {
	copies := m.trustCopies()
	read := make([]trustRecord, len(copies))
	good := make([]bool, len(copies))
	t := trustRecord{Format: trustFormat}
	var found bool
	var broken []string
	for i, c := range copies {
		r, err := readTrust(c.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			m.opts.Log.Error("trust record damaged; the other copy is taken", "where", c.where, "err", err)
			broken = append(broken, err.Error())
		default:
			read[i], good[i], found = r, true, true
			t = stricter(t, r)
		}
	}
	if !found {
		if len(broken) > 0 {
			m.keys = nil
			return "no copy of the trust record (security epoch floor, trusted keys) is readable: " + strings.Join(broken, "; ")
		}
		m.keys = m.opts.Keys
		return ""
	}
	keys, err := t.keys(m.opts.Keys)
	if err != nil {
		// Left as they are for whoever looks: no merge of them is a record.
		m.trust, m.keys = t, nil
		return fmt.Sprintf("the trust record's copies disagree on the keys of generation %d and trust none in common: %v", t.generation(), err)
	}
	m.trust, m.keys = t, keys
	var repair []trustCopy
	var where []string
	for i, c := range copies {
		if !good[i] || !read[i].same(t) {
			repair, where = append(repair, c), append(where, c.where)
		}
	}
	if len(repair) > 0 {
		m.opts.Log.Warn("repairing the trust record", "on", where, "securityEpochFloor", t.SecurityEpochFloor, "keyGeneration", t.generation())
		m.writeTrust(t, repair)
	}
	return ""
}

// raiseTrust adds what the committed running firmware carries to the trust record: its
// security epoch, and its next key set when that is a newer generation. The manifest is
// the slot's on the ESP, verified with the keys trusted now, so that only a signed
// manifest raises anything. Raising is idempotent: New does it again for a committed slot,
// which covers a power cut between the commit and the record's write.
func (m *Manager) raiseTrust() {
	if m.problem != "" {
		// An unreadable record or no keys: raising from scratch would lower what the
		// record held, so it stays as it is and updates stay unavailable.
		return
	}
	man, err := readSlotManifest(m.opts.ESP.Root(), m.opts.Slot, m.keys)
	if err != nil {
		// After a rotation the firmware that made it is signed with a key it retired.
		m.opts.Log.Info("the running slot's manifest does not verify with the keys trusted now; it raises nothing", "slot", m.opts.Slot, "err", err)
		return
	}
	if man.SecurityEpoch < m.trust.SecurityEpochFloor {
		m.opts.Log.Warn("the running firmware's security epoch is below the floor: install a current bundle",
			"version", man.Version, "securityEpoch", man.SecurityEpoch, "floor", m.trust.SecurityEpochFloor)
	}
	next := m.trust
	next.Format = trustFormat
	next.SecurityEpochFloor = max(next.SecurityEpochFloor, man.SecurityEpoch)
	if man.NextKeys != nil && man.NextKeys.Generation > next.generation() {
		next.TrustedKeys = man.NextKeys
	}
	if next.same(m.trust) {
		return
	}
	keys, err := next.keys(m.opts.Keys)
	if err != nil {
		m.opts.Log.Error("the running firmware's next keys do not parse; the trust record stays as it is", "err", err)
		return
	}
	m.writeTrust(next, m.trustCopies())
	retired := keyIDs(m.keys)
	m.trust, m.keys = next, keys
	m.opts.Marker("EDGEGATE-UPDATE trust epoch=%d keys=%d", next.SecurityEpochFloor, next.generation())
	m.opts.Log.Info("trust record raised by the committed firmware", "version", man.Version,
		"securityEpochFloor", next.SecurityEpochFloor, "keyGeneration", next.generation(), "keys", keyIDs(keys), "before", retired)
}

func keyIDs(keys []bundle.PublicKey) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}

// readSlotManifest reads a slot's stored manifest and verifies it with keys.
func readSlotManifest(root string, slot layout.Slot, keys []bundle.PublicKey) (bundle.Manifest, error) {
	raw, err := os.ReadFile(filepath.Join(root, slot.File(layout.ManifestFile)))
	if err != nil {
		return bundle.Manifest{}, err
	}
	sig, err := os.ReadFile(filepath.Join(root, slot.File(layout.SignatureFile)))
	if err != nil {
		return bundle.Manifest{}, err
	}
	return bundle.VerifyManifest(raw, sig, keys)
}

// trustStatus is Status's view of the record.
func (m *Manager) trustStatus() TrustStatus {
	return TrustStatus{SecurityEpochFloor: m.trust.SecurityEpochFloor, KeyGeneration: m.trust.generation(), Keys: keyIDs(m.keys)}
}

package update

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Anti-rollback: the security epoch floor and key rotation, kept outside the slots.

// commitUpdate installs bun through m, boots the new slot, lets it prove healthy and
// returns its manager (version is what the bundle holds).
func (g *gateway) commitUpdate(m *Manager, bun []byte, version string) *Manager {
	g.t.Helper()
	install(g.t, m, bun, true)
	slot := g.boot()
	n := g.manager(slot, version, healthy)
	n.Start(context.Background())
	if st := n.Status(); st.Trial != nil || len(st.History) == 0 || st.History[0].Phase != PhaseCommitted {
		g.t.Fatalf("update to %s did not commit: %+v", version, st)
	}
	return n
}

// trustFiles are the two copies of the trust record.
func (g *gateway) trustFiles() (data, esp string) {
	return filepath.Join(g.data, trustFile), filepath.Join(g.esp, layout.TrustPath)
}

// wantTrust checks the manager's view and both copies on the disks.
func (g *gateway) wantTrust(m *Manager, floor, gen uint64, keys ...bundle.PublicKey) {
	g.t.Helper()
	ids := keyIDs(keys)
	if st := m.Status().Trust; st.SecurityEpochFloor != floor || st.KeyGeneration != gen || !slices.Equal(st.Keys, ids) {
		g.t.Errorf("trust %+v, want floor %d, generation %d, keys %v", st, floor, gen, ids)
	}
	data, esp := g.trustFiles()
	for _, f := range []string{data, esp} {
		r, err := readTrust(f)
		if err != nil {
			g.t.Errorf("%s: %v", f, err)
			continue
		}
		if r.SecurityEpochFloor != floor || r.generation() != gen {
			g.t.Errorf("%s: floor %d, generation %d; want %d, %d", f, r.SecurityEpochFloor, r.generation(), floor, gen)
		}
	}
}

// refused installs bun, which must be refused with want before anything is written.
func (g *gateway) refused(m *Manager, bun []byte, force bool, want error, names ...string) {
	g.t.Helper()
	before := g.tree() + "\n" + treeOf(g.t, g.data, stateFile)
	_, err := m.Install(context.Background(), bytes.NewReader(bun), Request{Source: "test", Force: force, Activate: true})
	if !errors.Is(err, ErrRefused) || !errors.Is(err, want) {
		g.t.Fatalf("Install (force %v): %v, want ErrRefused and %v", force, err, want)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			g.t.Errorf("refusal %q does not name %q", err, n)
		}
	}
	if h := m.Status().History[0]; h.Phase != PhaseRefused || !strings.Contains(h.Reason, err.Error()) {
		g.t.Errorf("recorded as %s %q", h.Phase, h.Reason)
	}
	if after := g.tree() + "\n" + treeOf(g.t, g.data, stateFile); after != before {
		g.t.Errorf("a refused bundle changed the disks:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// treeOf is gateway.tree for another directory, leaving out skip (the state file, which
// records the refusal).
func treeOf(t *testing.T, dir, skip string) string {
	t.Helper()
	g := &gateway{t: t, esp: dir}
	var keep []string
	for _, l := range strings.Split(g.tree(), "\n") {
		if !strings.HasPrefix(l, skip+" ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func TestEpochFloor(t *testing.T) {
	g, m := onFactoryImage(t)
	g.wantTrustAbsent()
	rel := func(version string, epoch uint64) []byte {
		return g.release(bundle.Release{Board: testBoard, Version: version, SecurityEpoch: epoch}, g.key)
	}

	// Installed, switched, on trial: the floor is still 0, nothing is written.
	install(t, m, rel("v1.1.0", 2), true)
	g.boot()
	trial := g.manager(layout.SlotB, "v1.1.0", never)
	if f := trial.Status().Trust.SecurityEpochFloor; f != 0 {
		t.Errorf("floor %d during the trial, want 0", f)
	}
	g.wantTrustAbsent()
	// A trial that fails leaves it so: the old slot comes back with floor 0.
	g.clock = g.clock.Add(time.Second)
	trial.Start(context.Background())
	g.armNext(1)
	g.failTry(2)
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("after the failed trial: boots %s", s)
	}
	m = g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); st.History[0].Phase != PhaseRolledBack || st.Trust.SecurityEpochFloor != 0 {
		t.Fatalf("after the rollback: %s, floor %d", st.History[0].Phase, st.Trust.SecurityEpochFloor)
	}
	g.wantTrustAbsent()

	// Committed: the floor rises to 2, on both disks.
	m = g.commitUpdate(m, rel("v1.1.0", 2), "v1.1.0")
	g.wantTrust(m, 2, 0, g.pub)

	// Below the floor: refused, forced or not, before anything is written.
	for _, force := range []bool{false, true} {
		g.refused(m, rel("v1.2.0", 1), force, bundle.ErrBelowFloor, "security epoch 1", "floor 2")
	}
	// Within the epoch, force still orders versions: a downgrade is taken.
	g.refused(m, rel("v1.0.9", 2), false, bundle.ErrNotNewer)
	if _, err := m.Install(context.Background(), bytes.NewReader(rel("v1.0.9", 2)), Request{Force: true}); err != nil {
		t.Fatalf("forced downgrade within epoch 2: %v", err)
	}
	// A higher epoch raises the floor at its commit, and only then.
	m = g.commitUpdate(m, rel("v1.3.0", 5), "v1.3.0")
	g.wantTrust(m, 5, 0, g.pub)
	g.refused(m, rel("v1.4.0", 2), true, bundle.ErrBelowFloor, "security epoch 2", "floor 5")

	// A power cut between the commit and the record's write: the committed firmware
	// raises the floor again at its next start.
	data, esp := g.trustFiles()
	os.Remove(data)
	os.Remove(esp)
	g.boot()
	m = g.manager(layout.SlotA, "v1.3.0", healthy)
	g.wantTrust(m, 5, 0, g.pub)
	if n := strings.Count(strings.Join(g.markers, " "), "trust"); n != 3 {
		t.Errorf("markers %q: %d trust markers, want 3 (two commits, one restart)", g.markers, n)
	}
}

func (g *gateway) wantTrustAbsent() {
	g.t.Helper()
	data, esp := g.trustFiles()
	for _, f := range []string{data, esp} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			g.t.Errorf("%s: %v, want no trust record yet", f, err)
		}
	}
}

// rotated is a gateway whose firmware rotated from the baked-in key K1 (g.key) to K2 in
// generation 1 and committed security epoch 3, running v1.1.0 in slot B.
func rotated(t *testing.T) (g *gateway, m *Manager, k2 bundle.PrivateKey) {
	t.Helper()
	g = newGateway(t)
	g.boot()
	pub2, k2, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m = g.manager(layout.SlotA, "v1.0.0", healthy)
	// Signed by the key trusted now, carrying the next set.
	bun := g.release(bundle.Release{Board: testBoard, Version: "v1.1.0", SecurityEpoch: 3,
		NextKeys: bundle.NewKeySet(1, []bundle.PublicKey{pub2})}, g.key)
	install(t, m, bun, true)
	g.boot()
	trial := g.manager(layout.SlotB, "v1.1.0", never)
	if st := trial.Status().Trust; st.KeyGeneration != 0 || !slices.Equal(st.Keys, []string{g.pub.ID}) {
		t.Fatalf("keys rotated before the commit: %+v", st)
	}
	g.clock = g.clock.Add(time.Second) // past the trial deadline
	trial.Start(context.Background())  // not healthy: no commit, no rotation
	g.wantTrustAbsent()
	g.boot()
	m = g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	g.wantTrust(m, 3, 1, pub2)
	return g, m, k2
}

func TestKeyRotation(t *testing.T) {
	g, m, k2 := rotated(t)
	// The retired key signs nothing any more, whatever the bundle claims.
	for _, epoch := range []uint64{3, 9} {
		g.refused(m, g.release(bundle.Release{Board: testBoard, Version: "v1.2.0", SecurityEpoch: epoch}, g.key), true,
			bundle.ErrUnknownKey, g.key.ID, k2.ID)
	}
	// A bundle signed by the new key carrying an older generation (the old key back) is
	// installed and committed, but its set is not adopted: generations only go up.
	back := bundle.NewKeySet(1, []bundle.PublicKey{g.pub, k2.Public()})
	m = g.commitUpdate(m, g.release(bundle.Release{Board: testBoard, Version: "v1.2.0", SecurityEpoch: 3, NextKeys: back}, k2), "v1.2.0")
	g.wantTrust(m, 3, 1, k2.Public())
	g.refused(m, g.release(bundle.Release{Board: testBoard, Version: "v1.3.0", SecurityEpoch: 3}, g.key), false, bundle.ErrUnknownKey)
	// The next generation may bring any set, signed by a key of the current one.
	_, k3, _ := bundle.GenerateKey(rand.Reader)
	m = g.commitUpdate(m, g.release(bundle.Release{Board: testBoard, Version: "v1.3.0", SecurityEpoch: 3,
		NextKeys: bundle.NewKeySet(2, []bundle.PublicKey{k3.Public(), g.pub})}, k2), "v1.3.0")
	g.wantTrust(m, 3, 2, k3.Public(), g.pub)
	g.refused(m, g.release(bundle.Release{Board: testBoard, Version: "v1.4.0", SecurityEpoch: 3}, k2), false, bundle.ErrUnknownKey)
}

// TestOlderSlotKeepsTrust: after the rotation, the older slot (built with only the old key
// baked in) boots from the boot menu, or a fallback: it trusts the record, not its own keys.
func TestOlderSlotKeepsTrust(t *testing.T) {
	g, _, k2 := rotated(t)
	m := g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); !st.Available {
		t.Fatalf("older slot: updates unavailable: %s", st.Problem)
	}
	g.wantTrust(m, 3, 1, k2.Public())
	g.refused(m, g.release(bundle.Release{Board: testBoard, Version: "v2.0.0", SecurityEpoch: 3}, g.key), true, bundle.ErrUnknownKey)
	g.refused(m, g.release(bundle.Release{Board: testBoard, Version: "v2.0.0", SecurityEpoch: 2}, k2), true, bundle.ErrBelowFloor)
	if _, err := m.Install(context.Background(), bytes.NewReader(g.release(bundle.Release{Board: testBoard, Version: "v1.0.1", SecurityEpoch: 3}, k2)), Request{Force: true}); err != nil {
		t.Errorf("a bundle of the floor's epoch signed by the new key: %v", err)
	}
}

func TestTrustCopies(t *testing.T) {
	g, _, k2 := rotated(t)
	data, esp := g.trustFiles()
	good, err := os.ReadFile(esp)
	if err != nil {
		t.Fatal(err)
	}
	weaker := []byte(`{"format": 1, "securityEpochFloor": 1}`)
	for _, tc := range []struct {
		name      string
		data, esp []byte // nil removes the copy
	}{
		{"data partition wiped", nil, good},
		{"ESP copy missing", good, nil},
		{"ESP copy damaged", good, []byte(`{"format": 1, "securityEp`)},
		{"data copy damaged", []byte("\x00\x00\x00"), good},
		{"data copy lowered", weaker, good},
		{"ESP copy lowered", good, weaker},
		{"ESP copy with an unknown field", good, []byte(`{"format": 1, "securityEpochFloor": 9, "x": 1}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for f, b := range map[string][]byte{data: tc.data, esp: tc.esp} {
				os.Remove(f)
				if b != nil {
					if err := os.WriteFile(f, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			g.t = t
			// The older slot, whose own manifest raises nothing: what it trusts is the
			// copies' merge alone.
			m := g.manager(layout.SlotA, "v1.0.0", healthy)
			if st := m.Status(); !st.Available {
				t.Fatalf("unavailable: %s", st.Problem)
			}
			g.wantTrust(m, 3, 1, k2.Public())
			for _, f := range []string{data, esp} {
				if b, _ := os.ReadFile(f); !bytes.Equal(b, good) {
					t.Errorf("%s not repaired:\n%s", f, b)
				}
			}
		})
	}
	g.t = t

	// Both damaged: the floor is unknown, so updates are unavailable (fail closed).
	writeTestFiles(t, map[string][]byte{data: []byte("{"), esp: []byte("{")})
	m := g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); st.Available || !strings.Contains(st.Problem, "no copy of the trust record") || len(st.Trust.Keys) != 0 {
		t.Errorf("both copies damaged: %+v", st)
	}
	if _, err := m.Install(context.Background(), bytes.NewReader(nil), Request{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Install with both copies damaged: %v", err)
	}
	if b, _ := os.ReadFile(esp); string(b) != "{" {
		t.Errorf("the damaged record was overwritten: %q", b)
	}

	// Two sets of one generation with no key in common: none is trusted, nothing written.
	pub3, _, _ := bundle.GenerateKey(rand.Reader)
	other := bytes.Replace(good, []byte(strings.TrimSuffix(string(k2.Public().Marshal()), "\n")),
		[]byte(strings.TrimSuffix(string(pub3.Marshal()), "\n")), 1)
	writeTestFiles(t, map[string][]byte{data: good, esp: other})
	m = g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); st.Available || !strings.Contains(st.Problem, "disagree on the keys of generation 1") || len(st.Trust.Keys) != 0 {
		t.Errorf("disjoint sets: %+v", st)
	}
	if b, _ := os.ReadFile(esp); !bytes.Equal(b, other) {
		t.Errorf("a disagreeing copy was rewritten:\n%s", b)
	}
}

func writeTestFiles(t *testing.T, files map[string][]byte) {
	t.Helper()
	for f, b := range files {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStricter: the merge of two copies.
func TestStricter(t *testing.T) {
	_, k1, _ := bundle.GenerateKey(rand.Reader)
	_, k2, _ := bundle.GenerateKey(rand.Reader)
	_, k3, _ := bundle.GenerateKey(rand.Reader)
	set := func(gen uint64, keys ...bundle.PrivateKey) *bundle.KeySet {
		var pubs []bundle.PublicKey
		for _, k := range keys {
			pubs = append(pubs, k.Public())
		}
		return bundle.NewKeySet(gen, pubs)
	}
	rec := func(floor uint64, s *bundle.KeySet) trustRecord {
		return trustRecord{Format: trustFormat, SecurityEpochFloor: floor, TrustedKeys: s}
	}
	for _, tc := range []struct {
		name string
		a, b trustRecord
		want trustRecord
	}{
		{"higher floor, newer keys", rec(5, set(1, k1)), rec(2, set(2, k2)), rec(5, set(2, k2))},
		{"baked-in against a set", rec(0, nil), rec(0, set(1, k1)), rec(0, set(1, k1))},
		{"same", rec(3, set(1, k1, k2)), rec(3, set(1, k1, k2)), rec(3, set(1, k1, k2))},
		{"same generation, different keys", rec(3, set(1, k1, k2)), rec(3, set(1, k2, k3)), rec(3, set(1, k2))},
	} {
		for _, order := range [][2]trustRecord{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := stricter(order[0], order[1]); !got.same(tc.want) {
				t.Errorf("%s: %+v, want %+v", tc.name, got.TrustedKeys, tc.want.TrustedKeys)
			}
		}
	}
	// Nothing in common: no key is trusted.
	if _, err := stricter(rec(0, set(1, k1)), rec(0, set(1, k2))).keys(nil); err == nil {
		t.Error("two disjoint sets of one generation left a key trusted")
	}
}

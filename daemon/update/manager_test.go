package update

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/layout"
)

const testBoard = "qemu-x86_64"

// gateway is one simulated gateway: an ESP and a data partition in directories, booted by
// a stand-in for systemd-boot that follows layout's rules, and an NVRAM holding the
// one-shot variable.
type gateway struct {
	t     *testing.T
	esp   string
	data  string
	pub   bundle.PublicKey
	key   bundle.PrivateKey
	clock time.Time

	mu      sync.Mutex
	reboots int
	markers []string
	oneShot string
	armErr  error // what BootOnce fails with
}

// gatewayLoader is the gateway's EFI variables, as the Manager sees them.
type gatewayLoader struct{ g *gateway }

func (l gatewayLoader) Loader() (string, error) { return "systemd-boot (simulated)", nil }

func (l gatewayLoader) BootOnce(pattern string) error {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	if l.g.armErr != nil {
		return l.g.armErr
	}
	l.g.oneShot = pattern
	return nil
}

func (l gatewayLoader) OneShot() (string, error) {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	return l.g.oneShot, nil
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	pub, key, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, esp: t.TempDir(), data: t.TempDir(), pub: pub, key: key,
		clock: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
	// The factory image: slot A committed with v1.0.0, slot B empty.
	g.writeFactorySlot("v1.0.0")
	return g
}

// writeFactorySlot fills slot A as the image builder does.
func (g *gateway) writeFactorySlot(version string) {
	g.t.Helper()
	bun := g.bundle(testBoard, version, nil)
	br, err := bundle.Open(bytes.NewReader(bun), bundle.Policy{Board: testBoard, Keys: []bundle.PublicKey{g.pub}, Force: true})
	if err != nil {
		g.t.Fatal(err)
	}
	if err := writeSlot(g.esp, layout.SlotA, br, br.Manifest()); err != nil {
		g.t.Fatal(err)
	}
	e := layout.Entry{Slot: layout.SlotA, Generation: 1, Firmware: version,
		Options: []string{"console=ttyS0", "panic=-1", "edgegate.slot=a"}}
	if err := writeFileSync(filepath.Join(g.esp, layout.EntryPath(e.FileName())), e.Render(), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// bundle makes a signed bundle; tamper, when set, edits the archive's bytes.
func (g *gateway) bundle(board, version string, tamper func([]byte)) []byte {
	g.t.Helper()
	out := g.release(bundle.Release{Board: board, Version: version}, g.key)
	if tamper != nil {
		tamper(out)
	}
	return out
}

// release makes a bundle of rel (its build time is the gateway's clock) signed with key.
func (g *gateway) release(rel bundle.Release, key bundle.PrivateKey) []byte {
	g.t.Helper()
	kernel := bytes.Repeat([]byte("kernel "+rel.Version+" "), 20000)
	initramfs := bytes.Repeat([]byte("initramfs "+rel.Version+" "), 30000)
	rel.BuildTime = g.clock
	var b bytes.Buffer
	if _, err := bundle.Create(&b, rel, bytes.NewReader(kernel), bytes.NewReader(initramfs), key); err != nil {
		g.t.Fatal(err)
	}
	return b.Bytes()
}

// boot is systemd-boot: it picks the entry the one-shot variable names, removing the
// variable, else the first entry in layout.Order, and renames an entry with a boot counter
// to count the boot.
func (g *gateway) boot() layout.Slot {
	g.t.Helper()
	entries, problems, err := readEntries(g.esp)
	if err != nil || len(problems) > 0 {
		g.t.Fatalf("boot loader: %v %v", err, problems)
	}
	if len(entries) == 0 {
		g.t.Fatal("boot loader: no entry to boot")
	}
	var all []layout.Entry
	for _, e := range entries {
		all = append(all, e.entry)
	}
	ordered := layout.Order(all)
	pick := ordered[0]
	g.mu.Lock()
	pattern := g.oneShot
	g.oneShot = ""
	g.mu.Unlock()
	for _, e := range ordered {
		if pattern != "" && layout.OneShotMatches(pattern, e.FileName()) {
			pick = e
			break
		}
	}
	if t := pick.Tries; t != nil {
		next := &layout.Tries{Left: max(t.Left-1, 0), Done: t.Done + 1}
		dir := filepath.Join(g.esp, layout.EntriesDir)
		if err := os.Rename(filepath.Join(dir, pick.FileName()), filepath.Join(dir, layout.EntryFileName(pick.Slot, next))); err != nil {
			g.t.Fatal(err)
		}
	}
	return pick.Slot
}

// manager is the updater of one boot of slot, running version, with health h.
func (g *gateway) manager(slot layout.Slot, version string, h func() error) *Manager {
	g.clock = g.clock.Add(time.Minute)
	return New(Options{
		ESP: DirESP(g.esp), Loader: gatewayLoader{g}, StateDir: g.data, Slot: slot, Board: testBoard, Version: version,
		Keys: []bundle.PublicKey{g.pub}, TrialTimeout: 50 * time.Millisecond, Health: h,
		Reboot: func() { g.mu.Lock(); g.reboots++; g.mu.Unlock() },
		Marker: func(f string, args ...any) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.markers = append(g.markers, strings.Fields(fmt.Sprintf(f, args...))[1])
		},
		Now: func() time.Time { return g.clock },
	})
}

// tree lists every file on the ESP with its digest.
func (g *gateway) tree() string {
	g.t.Helper()
	var lines []string
	err := filepath.WalkDir(g.esp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(g.esp, p)
		lines = append(lines, rel+" "+hex.EncodeToString(sum[:8]))
		return nil
	})
	if err != nil {
		g.t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func healthy() error { return nil }

func never() error { return errors.New("rules not programmed yet") }

// onFactoryImage is a gateway booted from its factory image, with the updater running there.
func onFactoryImage(t *testing.T) (*gateway, *Manager) {
	t.Helper()
	g := newGateway(t)
	g.boot()
	return g, g.manager(layout.SlotA, "v1.0.0", healthy)
}

// activated is a gateway on its factory image that installed v1.1.0 and switched to it: its
// next boot is the first trial boot.
func activated(t *testing.T) *gateway {
	t.Helper()
	g, m := onFactoryImage(t)
	install(t, m, g.bundle(testBoard, "v1.1.0", nil), true)
	return g
}

func install(t *testing.T, m *Manager, bun []byte, activate bool) Attempt {
	t.Helper()
	a, err := m.Install(context.Background(), bytes.NewReader(bun), Request{Source: "test", Activate: activate})
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	return a
}

func TestGoodUpdateCommitsAndStays(t *testing.T) {
	g := newGateway(t)
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("factory image boots %s", s)
	}
	m := g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); !st.Available || st.Slots[0].Slot != layout.SlotA || st.Slots[0].State != "committed" {
		t.Fatalf("factory status: %+v", st)
	}
	a := install(t, m, g.bundle(testBoard, "v1.1.0", nil), true)
	if a.Phase != PhaseTrial || a.To != (Firmware{layout.SlotB, "v1.1.0"}) {
		t.Fatalf("after Install: %+v", a)
	}
	if _, err := m.Install(context.Background(), bytes.NewReader(nil), Request{}); !errors.Is(err, ErrBusy) {
		t.Errorf("an install while rebooting: %v, want ErrBusy", err)
	}
	if st := m.Status(); !st.Slots[0].BootsNext || st.Slots[0].Slot != layout.SlotB || st.Slots[0].State != "trial, try 1 of 2 armed" {
		t.Errorf("after the switch: %+v", st.Slots)
	}

	// The trial boot.
	if s := g.boot(); s != layout.SlotB {
		t.Fatalf("after the switch the boot loader boots %s", s)
	}
	m = g.manager(layout.SlotB, "v1.1.0", healthy)
	if st := m.Status(); st.Trial == nil || st.Trial.Boot != 1 || st.Trial.Tries != 2 {
		t.Fatalf("trial boot status: %+v", st.Trial)
	}
	if _, err := m.Install(context.Background(), bytes.NewReader(nil), Request{}); !errors.Is(err, ErrBusy) {
		t.Errorf("an install during the trial: %v, want ErrBusy", err)
	}
	m.Start(context.Background())
	st := m.Status()
	if st.Trial != nil || st.Pending != nil || len(st.History) != 1 || st.History[0].Phase != PhaseCommitted {
		t.Fatalf("after a healthy trial: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(g.esp, layout.EntryPath("edgegate-b.conf"))); err != nil {
		t.Errorf("committed entry: %v", err)
	}
	if st.History[0].TrialBoots != 1 {
		t.Errorf("committed after %d trial boots, want 1", st.History[0].TrialBoots)
	}
	// It stays: the next boots are B without counting, and A is still there to go back to.
	for range 2 {
		if s := g.boot(); s != layout.SlotB {
			t.Fatalf("after the commit the boot loader boots %s", s)
		}
	}
	if _, err := verifySlot(g.esp, layout.SlotA, []bundle.PublicKey{g.pub}); err != nil {
		t.Errorf("the old slot: %v", err)
	}
	m = g.manager(layout.SlotB, "v1.1.0", healthy)
	if st := m.Status(); st.History[0].Phase != PhaseCommitted || st.Trial != nil {
		t.Errorf("a later boot: %+v", st)
	}
	// The next update goes to A, with the next generation.
	install(t, m, g.bundle(testBoard, "v1.2.0", nil), true)
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("second update: boot loader boots %s", s)
	}
	want := []string{"receiving", "staged", "switched", "trial", "committed", "receiving", "staged", "switched"}
	if got := strings.Join(g.markers, " "); got != strings.Join(want, " ") {
		t.Errorf("markers %q, want %q", got, want)
	}
}

// bootSlot boots the gateway and fails the test unless want comes up.
func (g *gateway) bootSlot(want layout.Slot, when string) {
	g.t.Helper()
	if s := g.boot(); s != want {
		g.t.Fatalf("%s: the boot loader boots %s, want %s", when, s, want)
	}
}

// startReboots runs m.Start and fails the test unless it asked for one reboot.
func (g *gateway) startReboots(m *Manager, when string) {
	g.t.Helper()
	before := g.reboots
	m.Start(context.Background())
	if g.reboots != before+1 {
		g.t.Fatalf("%s: %d reboots asked for, want 1", when, g.reboots-before)
	}
}

// failTry is one trial boot of B that never becomes healthy: it reboots at its deadline.
func (g *gateway) failTry(boot int) {
	g.t.Helper()
	when := fmt.Sprintf("trial boot %d", boot)
	g.bootSlot(layout.SlotB, when)
	m := g.manager(layout.SlotB, "v1.1.0", never)
	if st := m.Status(); st.Trial == nil || st.Trial.Boot != boot || st.Trial.Tries != DefaultTries {
		g.t.Fatalf("%s: status %+v", when, st.Trial)
	}
	g.clock = g.clock.Add(time.Second) // past the trial deadline
	g.startReboots(m, when)
}

// armNext is the boot of the committed slot A after trial boot boot of B: it arms the next
// try and reboots into it.
func (g *gateway) armNext(boot int) {
	g.t.Helper()
	when := fmt.Sprintf("after trial boot %d", boot)
	g.bootSlot(layout.SlotA, when)
	m := g.manager(layout.SlotA, "v1.0.0", healthy)
	st := m.Status()
	if !st.Rebooting || st.Pending == nil || st.Pending.TrialBoots != boot+1 || st.Slots[0].Slot != layout.SlotB ||
		st.Slots[0].State != fmt.Sprintf("trial, try %d of %d armed", boot+1, DefaultTries) {
		g.t.Fatalf("%s: rebooting %v, pending %+v, slots %+v", when, st.Rebooting, st.Pending, st.Slots)
	}
	g.startReboots(m, when)
}

func TestNeverHealthyRollsBack(t *testing.T) {
	g := activated(t)
	for boot := 1; boot <= DefaultTries; boot++ {
		g.failTry(boot)
		if boot < DefaultTries {
			g.armNext(boot)
		}
	}
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("after %d failed trial boots the boot loader boots %s", DefaultTries, s)
	}
	before := g.reboots
	m := g.manager(layout.SlotA, "v1.0.0", healthy)
	m.Start(context.Background())
	st := m.Status()
	if st.Pending != nil || len(st.History) != 1 || st.Rebooting || g.reboots != before {
		t.Fatalf("after the rollback: %+v, %d reboots", st, g.reboots-before)
	}
	h := st.History[0]
	if h.Phase != PhaseRolledBack || !strings.Contains(h.Reason, "did not prove healthy in 2 boot(s)") || !strings.Contains(h.Reason, "rules not programmed yet") {
		t.Errorf("rollback record: %s %q", h.Phase, h.Reason)
	}
	// The spent entry is gone; the old slot boots from now on.
	for _, s := range st.Slots {
		if s.Slot == layout.SlotB && s.State != "no boot entry" {
			t.Errorf("slot B after the rollback: %+v", s)
		}
	}
	if s := g.boot(); s != layout.SlotA {
		t.Errorf("later boot: %s", s)
	}
	want := "receiving staged switched trial unhealthy retry trial unhealthy rolled-back"
	if got := strings.Join(g.markers, " "); got != want {
		t.Errorf("markers %q, want %q", got, want)
	}
}

// TestTornCounterRename is the power cut in systemd-boot's own rename of the trial entry:
// both names are left, and a firmware that never reaches PID 1 (a kernel panic) is booted
// again only as long as tries are left, then the committed slot stays.
func TestTornCounterRename(t *testing.T) {
	g := activated(t)
	dir := filepath.Join(g.esp, layout.EntriesDir)
	for boot := 1; boot <= DefaultTries; boot++ {
		entries, _, err := readEntries(g.esp)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := entryFor(entries, layout.SlotB)
		if !ok {
			t.Fatalf("trial boot %d: slot B has no entry", boot)
		}
		if s := g.boot(); s != layout.SlotB {
			t.Fatalf("trial boot %d: the boot loader boots %s", boot, s)
		}
		// The rename was torn: the old name is back beside the new one. The kernel panics.
		if err := os.WriteFile(filepath.Join(dir, e.file), e.entry.Render(), 0o644); err != nil {
			t.Fatal(err)
		}
		if s := g.boot(); s != layout.SlotA {
			t.Fatalf("after trial boot %d panicked the boot loader boots %s, want a", boot, s)
		}
		m := g.manager(layout.SlotA, "v1.0.0", healthy)
		m.Start(context.Background())
		if boot < DefaultTries {
			if st := m.Status(); !st.Rebooting {
				t.Fatalf("after trial boot %d: no next try armed: %+v", boot, st.Pending)
			}
			continue
		}
		st := m.Status()
		if st.Pending != nil || len(st.History) != 1 || st.History[0].Phase != PhaseRolledBack || st.Rebooting {
			t.Fatalf("after %d trial boots: %+v", boot, st)
		}
	}
	for range 3 {
		if s := g.boot(); s != layout.SlotA {
			t.Fatalf("after the rollback the boot loader boots %s", s)
		}
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "edgegate-a.conf" {
		t.Errorf("entries after the rollback: %v, want slot A's alone", names)
	}
}

// TestCommitRemovesTornTrialNames: a trial boot that finds its entry under two names (a
// torn counter rename) commits one and removes the other.
func TestCommitRemovesTornTrialNames(t *testing.T) {
	g := activated(t)
	dir := filepath.Join(g.esp, layout.EntriesDir)
	entries, _, err := readEntries(g.esp)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := entryFor(entries, layout.SlotB)
	g.boot()
	if err := os.WriteFile(filepath.Join(dir, e.file), e.entry.Render(), 0o644); err != nil {
		t.Fatal(err)
	}
	m := g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if strings.Join(got, " ") != "edgegate-a.conf edgegate-b.conf" {
		t.Errorf("entries after the commit: %v", got)
	}
}

// TestArmingFails: when the one-shot variable cannot be set, the switch fails, nothing
// boots the new slot, and its trial entry is gone.
func TestArmingFails(t *testing.T) {
	g, m := onFactoryImage(t)
	g.armErr = errors.New("EFI variable LoaderEntryOneShot: read-only file system")
	_, err := m.Install(context.Background(), bytes.NewReader(g.bundle(testBoard, "v1.1.0", nil)), Request{Source: "test", Activate: true})
	if err == nil || !strings.Contains(err.Error(), "arming slot b's trial boot") || !strings.Contains(err.Error(), "LoaderEntryOneShot") {
		t.Fatalf("Install: %v", err)
	}
	st := m.Status()
	if st.Rebooting || g.reboots != 0 || st.History[0].Phase != PhaseFailed {
		t.Fatalf("after the failed switch: %+v", st)
	}
	for _, s := range st.Slots {
		if s.Slot == layout.SlotB && s.State != "no boot entry" {
			t.Errorf("slot B after the failed switch: %+v", s)
		}
	}
	if s := g.boot(); s != layout.SlotA {
		t.Errorf("after the failed switch: boots %s", s)
	}
}

func TestRefusedBundlesWriteNothing(t *testing.T) {
	g, m := onFactoryImage(t)
	before := g.tree()
	stranger := &gateway{t: t, clock: g.clock}
	stranger.pub, stranger.key, _ = bundle.GenerateKey(rand.Reader)
	good := g.bundle(testBoard, "v1.1.0", nil)
	tamperedKernel := g.bundle(testBoard, "v1.1.0", func(b []byte) {
		i := bytes.Index(b, []byte("kernel v1.1.0"))
		b[i] ^= 1
	})
	for _, c := range []struct {
		name   string
		bundle []byte
		want   error
		force  bool
	}{
		{"wrong board", g.bundle("qemu-arm64", "v1.1.0", nil), bundle.ErrWrongBoard, false},
		{"unknown key", stranger.bundle(testBoard, "v1.1.0", nil), bundle.ErrUnknownKey, false},
		{"tampered kernel", tamperedKernel, bundle.ErrBadDigest, false},
		{"truncated", good[:len(good)/2], bundle.ErrMalformed, false},
		{"older", g.bundle(testBoard, "v0.9.0", nil), bundle.ErrNotNewer, false},
		{"same", g.bundle(testBoard, "v1.0.0", nil), bundle.ErrNotNewer, false},
		{"not a bundle", []byte("hello"), bundle.ErrMalformed, false},
	} {
		a, err := m.Install(context.Background(), bytes.NewReader(c.bundle), Request{Source: c.name, Activate: true, Force: c.force})
		if !errors.Is(err, ErrRefused) || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want ErrRefused and %v", c.name, err, c.want)
		}
		if a.Reason == "" || a.Phase != PhaseRefused {
			t.Errorf("%s: recorded as %s %q", c.name, a.Phase, a.Reason)
		}
		if after := g.tree(); after != before {
			t.Errorf("%s: the ESP changed:\nbefore:\n%s\nafter:\n%s", c.name, before, after)
		}
	}
	if g.reboots != 0 {
		t.Errorf("%d reboots", g.reboots)
	}
	st := m.Status()
	if len(st.History) != 7 || st.Pending != nil {
		t.Errorf("history after refusals: %d entries, pending %v", len(st.History), st.Pending)
	}
	// Force takes an older bundle (a deliberate downgrade), never a bad one.
	if _, err := m.Install(context.Background(), bytes.NewReader(g.bundle(testBoard, "v0.9.0", nil)), Request{Force: true}); err != nil {
		t.Errorf("forced downgrade: %v", err)
	}
	if _, err := m.Install(context.Background(), bytes.NewReader(tamperedKernel), Request{Force: true}); !errors.Is(err, bundle.ErrBadDigest) {
		t.Errorf("forced tampered bundle: %v", err)
	}
}

// blockingReader hands out data up to cut bytes, then signals and blocks until released.
type blockingReader struct {
	r       io.Reader
	cut     int64
	n       int64
	reached chan struct{}
	release chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.n >= b.cut {
		close(b.reached)
		<-b.release
		return 0, errors.New("connection closed")
	}
	p = p[:min(int64(len(p)), b.cut-b.n)]
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// snapshot copies a directory: the disk as it was when the power went.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(out, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPowerCutWhileWriting(t *testing.T) {
	g, m := onFactoryImage(t)
	bun := g.bundle(testBoard, "v1.1.0", nil)
	br := &blockingReader{r: bytes.NewReader(bun), cut: int64(len(bun)) * 2 / 3, reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error)
	go func() {
		_, err := m.Install(context.Background(), br, Request{Activate: true})
		done <- err
	}()
	<-br.reached
	if st := m.Status(); st.Pending == nil || st.Pending.Phase != PhaseReceiving || st.Pending.Bytes == 0 {
		t.Errorf("while receiving: %+v", st.Pending)
	}
	// The power goes now: the disks are what they are at this moment.
	esp, data := snapshot(t, g.esp), snapshot(t, g.data)
	close(br.release)
	<-done

	g2 := &gateway{t: t, esp: esp, data: data, pub: g.pub, key: g.key, clock: g.clock}
	if s := g2.boot(); s != layout.SlotA {
		t.Fatalf("after the cut: boots %s", s)
	}
	m2 := g2.manager(layout.SlotA, "v1.0.0", healthy)
	st := m2.Status()
	if st.Pending != nil || len(st.History) != 1 || st.History[0].Phase != PhaseInterrupted {
		t.Fatalf("after the cut: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(esp, layout.SlotB.File(layout.InitramfsFile+tempSuffix))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("partial file left: %v", err)
	}
	// The next update goes through.
	install(t, m2, bun, true)
	if s := g2.boot(); s != layout.SlotB {
		t.Errorf("update after the cut: boots %s", s)
	}
}

func TestPowerCutWhileStaged(t *testing.T) {
	g, m := onFactoryImage(t)
	a := install(t, m, g.bundle(testBoard, "v1.1.0", nil), false)
	if a.Phase != PhaseStaged || g.reboots != 0 {
		t.Fatalf("staged: %+v, %d reboots", a, g.reboots)
	}
	// Power cut, boot: still A, still staged.
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("staged update booted: %s", s)
	}
	m = g.manager(layout.SlotA, "v1.0.0", healthy)
	if st := m.Status(); st.Pending == nil || st.Pending.Phase != PhaseStaged {
		t.Fatalf("after the cut: %+v", st.Pending)
	}
	// A slot damaged meanwhile is not switched to.
	kernel := filepath.Join(g.esp, layout.SlotB.File(layout.KernelFile))
	good, _ := os.ReadFile(kernel)
	if err := os.WriteFile(kernel, append(good[:len(good)-1:len(good)-1], 'X'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Activate(); !errors.Is(err, bundle.ErrBadDigest) {
		t.Errorf("activating a damaged slot: %v", err)
	}
	if s := g.boot(); s != layout.SlotA {
		t.Errorf("after a refused activation: boots %s", s)
	}
	// Staged again, then activated.
	install(t, m, g.bundle(testBoard, "v1.1.0", nil), false)
	if a, err := m.Activate(); err != nil || a.Phase != PhaseTrial {
		t.Fatalf("Activate: %+v %v", a, err)
	}
	if s := g.boot(); s != layout.SlotB {
		t.Errorf("after Activate: boots %s", s)
	}
}

func TestPowerCutDuringTrialBoot(t *testing.T) {
	g := activated(t)
	g.boot()
	// The power goes during the first trial boot, before it is healthy: the committed slot
	// boots next and arms the second try.
	_ = g.manager(layout.SlotB, "v1.1.0", never)
	g.armNext(1)
	if s := g.boot(); s != layout.SlotB {
		t.Fatalf("second try boots %s", s)
	}
	m := g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	st := m.Status()
	h := st.History[0]
	if h.Phase != PhaseCommitted || h.TrialBoots != 2 {
		t.Fatalf("after the second try: %s, %d trial boots", h.Phase, h.TrialBoots)
	}
	events := ""
	for _, e := range h.Events {
		events += e.What + "\n"
	}
	for _, want := range []string{"trial boot 1 of 2 started", "arming try 2", "trial boot 2 of 2 started", "healthy"} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %q:\n%s", want, events)
		}
	}
}

// TestPowerCutBeforeArming: the switch wrote the trial entry, and the power went before the
// one-shot variable was set: the committed slot boots and arms the try itself.
func TestPowerCutBeforeArming(t *testing.T) {
	g := activated(t)
	g.oneShot = "" // the variable was never set
	g.armNext(1)
	if s := g.boot(); s != layout.SlotB {
		t.Fatalf("the armed try boots %s", s)
	}
	m := g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	if h := m.Status().History[0]; h.Phase != PhaseCommitted {
		t.Fatalf("after the try: %+v", h)
	}
}

func TestPowerCutAroundCommit(t *testing.T) {
	g := activated(t)
	g.boot()
	// The commit renamed the entry, and the power went before the state file was written.
	stateBefore := snapshot(t, g.data)
	m := g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	g.data = stateBefore
	if s := g.boot(); s != layout.SlotB {
		t.Fatalf("after the commit: boots %s", s)
	}
	st := g.manager(layout.SlotB, "v1.1.0", healthy).Status()
	if st.Trial != nil || st.Pending != nil || st.History[0].Phase != PhaseCommitted {
		t.Fatalf("state after the cut: %+v", st)
	}
}

// TestPowerCutAroundRollback: the old firmware records the rollback before it removes the
// spent entry; a cut between the two leaves the entry, which the next start removes, and
// the history says rolled back, once.
func TestPowerCutAroundRollback(t *testing.T) {
	g := activated(t)
	for boot := 1; boot <= DefaultTries; boot++ {
		g.failTry(boot)
		if boot < DefaultTries {
			g.armNext(boot)
		}
	}
	if s := g.boot(); s != layout.SlotA {
		t.Fatalf("after the tries: boots %s", s)
	}
	espBefore := snapshot(t, g.esp)
	g.manager(layout.SlotA, "v1.0.0", healthy)
	g.esp = espBefore // the entry's removal lost
	st := g.manager(layout.SlotA, "v1.0.0", healthy).Status()
	if st.Pending != nil || len(st.History) != 1 || st.History[0].Phase != PhaseRolledBack {
		t.Fatalf("after the cut: pending %+v, history %+v", st.Pending, st.History)
	}
	for _, s := range st.Slots {
		if s.Slot == layout.SlotB && s.State != "no boot entry" {
			t.Errorf("the spent entry is still there: %+v", s)
		}
	}
}

func TestTrialWithoutStateFile(t *testing.T) {
	g := activated(t)
	g.boot()
	// A new data partition: the ESP alone says this is a trial boot.
	g.data = t.TempDir()
	m := g.manager(layout.SlotB, "v1.1.0", healthy)
	m.Start(context.Background())
	st := m.Status()
	if h := st.History[0]; h.Phase != PhaseCommitted || h.From != (Firmware{layout.SlotA, "v1.0.0"}) {
		t.Fatalf("commit without a state file: %+v", h)
	}
}

func TestUnavailable(t *testing.T) {
	g := newGateway(t)
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no slot", Options{ESP: DirESP(g.esp), Keys: []bundle.PublicKey{g.pub}}, "did not boot from an A/B disk"},
		{"no keys", Options{ESP: DirESP(g.esp), Slot: layout.SlotA}, "trusts no signing keys"},
		{"no entry", Options{ESP: DirESP(g.esp), Loader: gatewayLoader{g}, Slot: layout.SlotB, Keys: []bundle.PublicKey{g.pub}}, "running slot b has no boot entry"},
		{"no EFI variables", Options{ESP: DirESP(g.esp), Slot: layout.SlotA, Keys: []bundle.PublicKey{g.pub}}, "EFI variables are unavailable"},
		{"no systemd-boot", Options{ESP: DirESP(g.esp), Loader: efivar.Store{Dir: t.TempDir()}, Slot: layout.SlotA, Keys: []bundle.PublicKey{g.pub}}, "boot loader did not identify itself"},
	} {
		m := New(c.opts)
		st := m.Status()
		if st.Available || !strings.Contains(st.Problem, c.want) {
			t.Errorf("%s: %+v", c.name, st)
		}
		if _, err := m.Install(context.Background(), bytes.NewReader(nil), Request{}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Install: %v", c.name, err)
		}
	}
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	pub, _, _ := bundle.GenerateKey(rand.Reader)
	if err := os.WriteFile(filepath.Join(dir, pub.ID+".pub"), pub.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadKeys(dir)
	if err != nil || len(keys) != 1 || keys[0].ID != pub.ID {
		t.Fatalf("LoadKeys: %v %v", keys, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.pub"), []byte("nope"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(dir); err == nil || !strings.Contains(err.Error(), "broken.pub") {
		t.Errorf("a broken key file: %v", err)
	}
	if keys, err := LoadKeys(filepath.Join(dir, "missing")); err != nil || len(keys) != 0 {
		t.Errorf("no key directory: %v %v", keys, err)
	}
}

package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/qemu/nbddisk"
)

// TestUpdate is the A/B update end to end: real firmware on a disk image booted through
// UEFI (OVMF on x86_64, AAVMF on arm64) with systemd-boot, persistent disk and NVRAM, the
// bundle uploaded to the dashboard from the host. On both boards, the power-cut matrix
// (powercut_test.go) records a good update that commits and a release that panics at every
// boot (kernel panic, a boot loop) and rolls back by itself, both checked as they happen,
// then cuts the power at every write step of that run on a disk that loses unflushed
// writes. On qemu-x86_64 a second gateway, beside it, goes through the rest: refused
// bundles write nothing; a good update commits and survives a power cut right after the
// commit; a release whose daemon never becomes healthy rolls back by itself after its
// tries; an update staged first and activated later; the good update raises the security
// epoch and rotates the signing key, after which the retired key and the lower epoch are
// refused, also by the old slot's firmware after the rollback (antirollback_test.go). The
// times from the upload to the commit and to the rollback are logged (-v).
func TestUpdate(t *testing.T) {
	eachBoard(t, firmwareBoards, func(tb testing.TB, b board.Board) {
		RequireUEFI(tb, b)
		RequireTools(tb, image.Tools...)
	}, 60*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		r := updateReleases(ctx, t, b)
		// Two gateways of their own, each a parallel subtest: the package still runs two
		// guests at a time, and the board's two chains no longer wait for each other.
		if b.Name == "qemu-x86_64" {
			t.Run("flow", func(t *testing.T) {
				t.Parallel()
				u := r.gateway(t, "gw", nil, "")
				u.boot(t)
				defer u.shutDown()
				u.waitFactory(t)
				t.Run("refused", u.refused)
				t.Run("good", func(t *testing.T) { u.good(t, "v1.1.0", layout.SlotB, true) })
				t.Run("anti-rollback", u.antiRollback)
				t.Run("never-healthy", func(t *testing.T) { u.rollback(t, "v1.2.0-unhealthy", layout.SlotA, "unhealthy slot=a boot=") })
				t.Run("anti-rollback-after-fallback", u.antiRollback)
				t.Run("staged-then-activate", u.stagedThenActivate)
			})
		}
		t.Run("power-cuts", func(t *testing.T) {
			t.Parallel()
			r.powerCuts(t, "v1.2.0-panics", "EDGEGATE-PANICINIT")
		})
	})
}

// The firmware's configuration in the test releases: the dashboard's token from the data
// partition, a short trial, and (the unhealthy release) a manifests directory that is not
// there, so the daemon never loads its source: a broken release, not a test hook.
const (
	updateConfig = `dashboardTokenFile: /var/lib/edgegate/dashboard-token
# QEMU's user network forwards the host's port to the guest's (10.0.2.2 connects).
dashboardBindAddress: 0.0.0.0:443
update:
  trialTimeout: 20s
`
	unhealthyConfig = updateConfig + "manifests: /etc/edgegate/no-such-directory\n"
	dashboardToken  = "0123456789abcdef0123456789abcdef"
)

// releases are one board's test firmware releases as signed bundles, with the key they
// trust and the boot loader their disk images carry.
type releases struct {
	ctx     context.Context
	board   board.Board
	log     *slog.Logger
	dir     string
	pub     bundle.PublicKey
	priv    bundle.PrivateKey
	pubFile string
	loader  image.BootLoader
	bundles map[string]string // by version
	// next is the key the x86_64 releases rotate to (rotateKeys).
	next bundle.PrivateKey
}

// releaseSpec is one release: its version, the package that becomes /init, its
// configuration file in the releases' directory ("" for none) and the build tags of /init.
type releaseSpec struct {
	version, init, config string
	tags                  []string
}

const daemonPkg = "github.com/edgegate/edgegate/daemon"

func newReleases(ctx context.Context, t *testing.T, b board.Board, specs []releaseSpec, configs map[string]string) *releases {
	t.Helper()
	r := &releases{ctx: ctx, board: b, log: testLog(t), dir: t.TempDir(),
		bundles: map[string]string{}}
	var err error
	if r.pub, r.priv, err = bundle.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	r.pubFile = filepath.Join(r.dir, "firmware.pub")
	writeTestFile(t, r.pubFile, r.pub.Marshal())
	for name, c := range configs {
		writeTestFile(t, filepath.Join(r.dir, name+".yaml"), []byte(c))
	}
	start := time.Now()
	for _, s := range specs {
		r.release(t, s)
	}
	cache, err := debianCache(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.loader, err = image.FetchBootLoader(ctx, r.log, b.Arch, cache); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d releases built and bundled in %v", b.Name, len(specs), time.Since(start).Round(time.Millisecond))
	return r
}

// updateTest is one gateway: its disk (slot A holding v1.0.0) and NVRAM, how its NIC
// reaches the host, and the VM that runs it.
type updateTest struct {
	*releases
	name   string
	disk   string
	vars   string
	port   int    // the dashboard, forwarded from the host's loopback
	netdev string // further user-mode network options (guestfwd)
	// nics, start and dashboard, when set, replace the user-mode NIC: the guest's NICs,
	// how QEMU starts (in a lab's namespace, where their taps are) and the dashboard's
	// base URL and client (hardware_test.go).
	nics      []NIC
	start     func(*exec.Cmd) error
	dashboard *dashboardAt
	vm        *VM
	// nbd, when set, serves the disk instead of QEMU opening it (the power-cut matrix).
	nbd *nbddisk.Disk
	// console, when set, sees every console line too.
	console func(line string)
	// reached, when set, is told each update marker good and rollback waited for, as soon
	// as it came (the power-cut matrix marks its steps with it).
	reached func(marker string)
}

// gateway makes a gateway's disk image: slot A from v1.0.0, data holding the files given
// (name: content) besides the dashboard's token.
func (r *releases) gateway(t *testing.T, name string, data map[string]string, netdev string) *updateTest {
	t.Helper()
	u := &updateTest{releases: r, name: name, netdev: netdev, port: freePort(t)}
	dir := filepath.Join(r.dir, name)
	content := filepath.Join(dir, "data")
	if err := os.MkdirAll(content, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(content, "dashboard-token"), []byte(dashboardToken+"\n"))
	for f, c := range data {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(content, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, filepath.Join(content, f), []byte(c))
	}
	u.disk, u.vars = filepath.Join(dir, "disk.img"), filepath.Join(dir, "vars.fd")
	if _, err := image.Build(r.ctx, r.log, u.disk, image.Spec{Board: r.board, BootLoader: r.loader, DataDir: content,
		A: &image.Slot{Bundle: r.bundles["v1.0.0"], Keys: []bundle.PublicKey{r.pub}, Generation: 1,
			Options: []string{"edgegate.ip=eth0:" + guestAddr}}}); err != nil {
		t.Fatal(err)
	}
	return u
}

// updateReleases builds the board's releases for TestUpdate; on qemu-x86_64 they rotate the
// signing key and raise the security epoch (rotateKeys). They are read-only afterwards, so
// gateways may share them.
func updateReleases(ctx context.Context, t *testing.T, b board.Board) *releases {
	t.Helper()
	specs := []releaseSpec{{"v1.0.0", daemonPkg, "good", nil}, {"v1.1.0", daemonPkg, "good", nil}}
	if b.Name == "qemu-x86_64" {
		specs = append(specs, releaseSpec{"v1.2.0-unhealthy", daemonPkg, "unhealthy", nil}, releaseSpec{"v1.3.0", daemonPkg, "good", nil})
	}
	specs = append(specs, releaseSpec{"v1.2.0-panics", panicInit, "", nil})
	r := newReleases(ctx, t, b, specs, map[string]string{"good": updateConfig, "unhealthy": unhealthyConfig})
	if b.Name == "qemu-x86_64" {
		r.rotateKeys(t)
	}
	return r
}

// panicInit is the init of a release that panics at every boot.
const panicInit = "github.com/edgegate/edgegate/qemu/testdata/panicinit"

// release builds the firmware s says and bundles it, signed with the test key. An empty
// config leaves the image's configuration out (an init that is not the daemon).
func (u *releases) release(t *testing.T, s releaseSpec) {
	t.Helper()
	img := TestImage{Board: u.board, Init: s.init, Tags: s.tags, Version: s.version, UpdateKeys: []string{u.pubFile}}
	if s.config != "" {
		img.Config = filepath.Join(u.dir, s.config+".yaml")
		img.Manifests = "testdata/firmwaretest/manifests"
	}
	fw, err := BuildTestImage(u.ctx, u.log, t.TempDir(), img)
	if err != nil {
		t.Fatal(err)
	}
	u.bundles[s.version] = u.makeBundle(t, s.version, u.board.Name, fw.Kernel(), fw.Initramfs(), u.priv)
}

func (u *releases) makeBundle(t *testing.T, version, boardName, kernel, initramfs string, key bundle.PrivateKey) string {
	t.Helper()
	return u.makeRelease(t, bundle.Release{Board: boardName, Version: version}, kernel, initramfs, key)
}

// makeRelease bundles rel (built now) signed with key.
func (u *releases) makeRelease(t *testing.T, rel bundle.Release, kernel, initramfs string, key bundle.PrivateKey) string {
	t.Helper()
	file := filepath.Join(u.dir, fmt.Sprintf("%s-%s-e%d-%s.bundle", rel.Board, rel.Version, rel.SecurityEpoch, key.ID))
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel.BuildTime = time.Now()
	if _, err := bundle.CreateFiles(f, rel, kernel, initramfs, key); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return file
}

// boot powers the gateway on: same disk, same NVRAM as before.
func (u *updateTest) boot(t *testing.T) {
	t.Helper()
	disk := Disk{Path: u.disk}
	if u.nbd != nil {
		disk = Disk{NBD: u.nbd.Socket()}
	}
	nics := u.nics
	if nics == nil {
		nics = []NIC{{Netdev: fmt.Sprintf("user,restrict=on,hostfwd=tcp:127.0.0.1:%d-:443", u.port) + u.netdev}}
	}
	vm, err := Start(u.ctx, Options{
		Board: u.board, UEFIVars: u.vars, AllowReboot: true, Disks: []Disk{disk},
		NICs: nics, Start: u.start,
		Timeout: 15 * time.Minute,
		Console: func(line string) {
			t.Log(u.name + ": " + line)
			if u.console != nil {
				u.console(line)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	u.vm = vm
}

// powerCut kills QEMU, as pulling the plug does, and powers the gateway on again.
func (u *updateTest) powerCut(t *testing.T) {
	t.Helper()
	u.vm.Kill()
	_, _ = u.vm.Wait()
	u.boot(t)
}

func (u *updateTest) wait(t *testing.T, marker string) Line {
	t.Helper()
	l := waitFor(t, u.vm, marker)
	if u.reached != nil {
		u.reached(marker)
	}
	return l
}

// waitFactory waits for the first boot of a new gateway: slot A, v1.0.0, updates available.
func (u *updateTest) waitFactory(t *testing.T) {
	t.Helper()
	u.waitReady(t)
	if st := u.status(t); !st.Available || st.Slot != layout.SlotA || st.Version != "v1.0.0" {
		t.Fatalf("factory image: %+v", st)
	}
}

// shutDown pulls the gateway's plug and waits for QEMU to end.
func (u *updateTest) shutDown() {
	u.vm.Kill()
	_, _ = u.vm.Wait()
}

// waitReady waits for a fresh boot's first sync and for the dashboard to answer.
func (u *updateTest) waitReady(t *testing.T) {
	t.Helper()
	u.wait(t, "EDGEGATE-READY")
	u.waitDashboard(t)
}

// refusedBundle is a bundle the gateway must refuse, and the reason it must give.
type refusedBundle struct{ name, file, reason string }

// expectRefused uploads each bundle (with query: "?force=1" forces the upload) and checks
// that the gateway refuses it with its reason, and that the ESP's digest is still before.
func (u *updateTest) expectRefused(t *testing.T, esp image.ESP, before, query string, bundles []refusedBundle) {
	t.Helper()
	for _, c := range bundles {
		code, a := u.upload(t, c.file, query)
		if code != http.StatusUnprocessableEntity || !strings.Contains(a.Error, c.reason) || a.Attempt == nil || a.Attempt.Phase != update.PhaseRefused {
			t.Errorf("%s: %d %+v, want 422 refused with %q", c.name, code, a, c.reason)
		}
		name := c.name
		if query != "" {
			name += " (force)"
		}
		t.Logf("%s: %d %s", name, code, a.Error)
	}
	if after := espDigest(u.ctx, t, esp); after != before {
		t.Errorf("refused bundles changed the ESP:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// refused: a bundle for another board, one whose kernel was altered after signing and
// one signed with a key the firmware does not trust are refused with their reason, and
// the ESP is not touched.
func (u *updateTest) refused(t *testing.T) {
	esp, err := image.OpenESP(u.disk)
	if err != nil {
		t.Fatal(err)
	}
	before := espDigest(u.ctx, t, esp)
	good := u.bundles["v1.1.0"]
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's first bytes follow the manifest and the signature in the archive.
	tampered := slices.Clone(raw)
	i := bytes.Index(tampered, []byte("\x00kernel\x00"))
	if i < 0 {
		i = len(tampered) / 2
	} else {
		i += 4096
	}
	tampered[i] ^= 0xff
	tamperedFile := filepath.Join(u.dir, "tampered.bundle")
	writeTestFile(t, tamperedFile, tampered)
	_, stranger, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	fw := filepath.Join(u.dir, "extract")
	kernel, initramfs := extractParts(t, good, u.pub, fw)
	u.expectRefused(t, esp, before, "", []refusedBundle{
		{"wrong board", u.makeBundle(t, "v1.1.0", "qemu-arm64", kernel, initramfs, u.priv), "wrong board"},
		{"tampered", tamperedFile, "part does not match the manifest"},
		{"unknown key", u.makeBundle(t, "v1.1.0", u.board.Name, kernel, initramfs, stranger), "unknown signing key"},
	})
	st := u.status(t)
	if len(st.History) != 3 || st.Pending != nil || slot(st, layout.SlotB).State != "no boot entry" {
		t.Errorf("after the refusals: %d history entries, pending %v, slot B %+v", len(st.History), st.Pending, slot(st, layout.SlotB))
	}
}

// good uploads a release, watches the new slot's trial boot commit, and checks that it
// stays: with cutAfterCommit the power goes right after the commit.
func (u *updateTest) good(t *testing.T, version string, to layout.Slot, cutAfterCommit bool) {
	from := u.status(t).Version
	start := time.Now()
	code, a := u.upload(t, u.bundles[version], "")
	if code != http.StatusOK || a.Attempt == nil || a.Attempt.Phase != update.PhaseTrial {
		t.Fatalf("upload: %d %+v", code, a)
	}
	uploaded := time.Since(start)
	u.wait(t, fmt.Sprintf("EDGEGATE-UPDATE trial slot=%s boot=1/%d", to, update.DefaultTries))
	u.wait(t, "EDGEGATE-UPDATE committed slot="+string(to))
	took := time.Since(start)
	if cutAfterCommit {
		u.powerCut(t)
		u.waitReady(t)
	} else {
		u.waitDashboard(t)
	}
	st := u.status(t)
	h := st.History[0]
	if st.Slot != to || st.Version != version || st.Trial != nil || h.Phase != update.PhaseCommitted ||
		h.From.Version != from || h.To != (update.Firmware{Slot: to, Version: version}) || h.TrialBoots != 1 {
		t.Fatalf("after the update: slot %s %s trial %v, last attempt %+v", st.Slot, st.Version, st.Trial, h)
	}
	if s := slot(st, to); s.State != "committed" || !s.BootsNext {
		t.Errorf("slot %s after the commit: %+v", to, s)
	}
	if s := slot(st, to.Other()); s.State != "committed" || s.Firmware != from {
		t.Errorf("the old slot after the commit: %+v, want committed %s to go back to", s, from)
	}
	t.Logf("%s: good update %s -> %s: upload %v, upload to committed %v (cut after commit: %v)",
		u.board.Name, from, version, uploaded.Round(time.Millisecond), took.Round(time.Millisecond), cutAfterCommit)
}

// rollback uploads a release that never becomes healthy; each of its boots prints
// badMarker. The boot loader must bring the old slot back by itself once the tries are
// spent, and the old firmware reports the rollback.
func (u *updateTest) rollback(t *testing.T, version string, to layout.Slot, badMarker string) {
	before := u.status(t)
	start := time.Now()
	code, a := u.upload(t, u.bundles[version], "")
	if code != http.StatusOK || a.Attempt == nil || a.Attempt.Phase != update.PhaseTrial {
		t.Fatalf("upload: %d %+v", code, a)
	}
	for boot := 1; boot <= update.DefaultTries; boot++ {
		u.wait(t, badMarker)
	}
	u.wait(t, fmt.Sprintf("EDGEGATE-UPDATE rolled-back slot=%s", to))
	u.waitReady(t)
	took := time.Since(start)
	st := u.status(t)
	h := st.History[0]
	if st.Slot != before.Slot || st.Version != before.Version || h.Phase != update.PhaseRolledBack ||
		!strings.Contains(h.Reason, fmt.Sprintf("did not prove healthy in %d boot(s)", update.DefaultTries)) || h.To.Version != version {
		t.Fatalf("after the rollback: slot %s %s, last attempt %+v", st.Slot, st.Version, h)
	}
	if s := slot(st, to); s.State != "no boot entry" {
		t.Errorf("the bad slot after the rollback: %+v", s)
	}
	t.Logf("%s: rollback from %s: upload to the old firmware ready again %v; reason: %s", u.board.Name, version, took.Round(time.Millisecond), h.Reason)
}

// stagedThenActivate stages an update (written and verified, not switched to), then
// activates it: one trial boot commits it. (Power cuts at every step of an update are the
// power-cut matrix's, powercut_test.go.)
func (u *updateTest) stagedThenActivate(t *testing.T) {
	before := u.status(t)
	to := before.Slot.Other()
	if code, a := u.upload(t, u.bundles["v1.3.0"], "?activate=0"); code != http.StatusOK || a.Attempt.Phase != update.PhaseStaged {
		t.Fatalf("staging: %d %+v", code, a)
	}
	st := u.status(t)
	if st.Slot != before.Slot || st.Pending == nil || st.Pending.Phase != update.PhaseStaged {
		t.Fatalf("staged: slot %s, pending %+v", st.Slot, st.Pending)
	}
	if code, a := u.post(t, "/api/update/activate", nil); code != http.StatusOK || a.Attempt.Phase != update.PhaseTrial {
		t.Fatalf("activate: %d %+v", code, a)
	}
	u.wait(t, fmt.Sprintf("EDGEGATE-UPDATE trial slot=%s boot=1/", to))
	u.wait(t, "EDGEGATE-UPDATE committed slot="+string(to))
	u.waitDashboard(t)
	st = u.status(t)
	h := st.History[0]
	if st.Slot != to || st.Version != "v1.3.0" || h.Phase != update.PhaseCommitted || h.TrialBoots != 1 {
		t.Fatalf("after the activation: slot %s %s, last attempt %+v", st.Slot, st.Version, h)
	}
}

// espDigest lists the ESP's files with their sizes and digests.
func espDigest(ctx context.Context, t *testing.T, esp image.ESP) string {
	t.Helper()
	files, err := esp.Files(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := esp.ReadFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %x\n", f, len(data), sha256.Sum256(data))
	}
	return b.String()
}

// extractParts writes a bundle's kernel and initramfs into dir.
func extractParts(t *testing.T, file string, key bundle.PublicKey, dir string) (kernel, initramfs string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br, err := bundle.Open(f, bundle.Policy{Board: bundleBoard(t, file), Keys: []bundle.PublicKey{key}, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kernel, initramfs = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.gz")
	for _, p := range []struct {
		file string
		copy func(io.Writer) (int64, error)
	}{{kernel, br.CopyKernel}, {initramfs, br.CopyInitramfs}} {
		out, err := os.Create(p.file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.copy(out); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return kernel, initramfs
}

// bundleBoard reads the board from a bundle file's name (<board>-<version>-<key>.bundle).
func bundleBoard(t *testing.T, file string) string {
	t.Helper()
	for _, name := range firmwareBoards {
		if strings.HasPrefix(filepath.Base(file), name+"-") {
			return name
		}
	}
	t.Fatalf("%s: no board in the name", file)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeTestFile(t *testing.T, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

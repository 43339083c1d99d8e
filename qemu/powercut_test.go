package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/qemu/nbddisk"
)

// The update power-cut matrix. A gateway's disk is served by nbddisk, a disk with a volatile
// write cache that records every write and flush the guest sends. One run takes a good
// update (upload, the one-shot trial boot, systemd-boot's rename of the entry counting it,
// the commit) and a release that panics at every boot (each try armed by the old firmware,
// systemd-boot counting the boot, the fallback, the old firmware recording the rollback and
// cleaning up). Every flush of that run is then a cut point: the disk a power
// cut just before it would have left is rebuilt offline (nbddisk.Replay), with the writes
// not yet flushed lost, kept, torn at sector granularity and reordered by a seeded policy,
// and the gateway boots from it. Each must boot a good slot with its data partition mounted,
// and its update history must say what happened at that point of the run.

// cutMark is a moment of the recorded run: the number of operations the disk had received
// when the test saw it.
type cutMark struct {
	name string
	op   int
}

// cutRun is the recorded run of one gateway.
type cutRun struct {
	*updateTest
	bad   string // the release that panics at every boot
	base  string // the disk as it was before the run
	ops   []nbddisk.Op
	marks map[string]int
	// console are the console's markers in the order they came, with the operations the
	// disk had received by then: what a cut point's step is called in the log.
	console []cutMark
}

// cutPoint is one cut: just before the flush ops[op], with writes pending since the flush
// before it, during the step the console named last.
type cutPoint struct {
	n, op   int
	pending int
	step    string
	// summary is what the cut did and left, for the log; damaged says fsck.fat found
	// something wrong on the ESP it left.
	summary string
	damaged bool
}

// powerCuts records the run, then checks the disk of every cut point and boots those the
// budget allows (all with EDGEGATE_POWERCUTS=all).
func (r *releases) powerCuts(t *testing.T, bad, badMarker string) {
	u := r.gateway(t, "cuts", nil, "")
	c := &cutRun{updateTest: u, bad: bad, base: u.disk + ".base", marks: map[string]int{}}
	copySparse(t, u.disk, c.base)
	d, err := nbddisk.Start(u.disk, nbddisk.Options{Record: true, Logger: r.log})
	if err != nil {
		t.Fatal(err)
	}
	u.nbd = d
	var mu sync.Mutex
	u.console = func(line string) {
		if step := cutStep(line); step != "" {
			mu.Lock()
			c.console = append(c.console, cutMark{step, len(d.Trace())})
			mu.Unlock()
		}
	}
	start := time.Now()
	c.record(t, badMarker)
	u.shutDown()
	c.ops = d.Trace()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	points := c.points()
	t.Logf("%s: recorded run: %d operations, %d flushes, %d cut points from the upload to the end (flushes after writes), recorded in %v",
		r.board.Name, len(c.ops), len(nbddisk.FlushPoints(c.ops)), len(points), time.Since(start).Round(time.Second))
	start = time.Now()
	damaged := 0
	for i := range points {
		c.offlineCheck(t, &points[i])
		if points[i].damaged {
			damaged++
		}
	}
	boot := c.budget(points)
	t.Logf("%s: every cut point checked offline in %v (%d left the FAT damaged); booting %d of them",
		r.board.Name, time.Since(start).Round(time.Second), damaged, len(boot))
	for _, p := range points {
		if boot[p.n] {
			c.bootCheck(t, p)
		}
	}
}

// record runs the good update and the bad one, each checked as the flow checks it (good,
// rollback), marking in the trace where each step was.
func (c *cutRun) record(t *testing.T, badMarker string) {
	u := c.updateTest
	mark := func(name string) { c.marks[name] = len(u.nbd.Trace()) }
	u.reached = func(marker string) {
		switch {
		case strings.HasPrefix(marker, "EDGEGATE-UPDATE committed"):
			mark("good-committed")
		case strings.HasPrefix(marker, "EDGEGATE-UPDATE rolled-back"):
			mark("bad-rolled-back")
		}
	}
	u.boot(t)
	u.waitFactory(t)
	mark("good-upload")
	if !t.Run("good", func(t *testing.T) { u.good(t, "v1.1.0", layout.SlotB, false) }) {
		t.FailNow()
	}
	mark("bad-upload")
	if !t.Run("panics", func(t *testing.T) { u.rollback(t, c.bad, layout.SlotA, badMarker) }) {
		t.FailNow()
	}
	mark("end")
}

// points are the cut points: the flushes from the good upload to the end of the run with
// writes before them (a flush right after a flush leaves what the cut before the first
// one keeping every write leaves).
func (c *cutRun) points() []cutPoint {
	var at []cutPoint
	last := -1
	for _, i := range nbddisk.FlushPoints(c.ops) {
		writes := i - last - 1
		last = i
		if i < c.marks["good-upload"] || i >= c.marks["end"] || writes == 0 {
			continue
		}
		step := "?"
		for _, m := range c.console {
			if m.op <= i {
				step = "after " + m.name
			}
		}
		at = append(at, cutPoint{n: len(at), op: i, pending: writes, step: step})
	}
	return at
}

// bootBudget is how many cut points of one board make test boots: each boot takes 10-30 s
// under TCG, and a run holds some 90 cut points. The disk of every cut point is checked
// offline; EDGEGATE_POWERCUTS=all boots them all.
const bootBudget = 10

// budget picks the cut points to boot, evenly spaced in turn among those that left the FAT
// damaged (up to half the budget: PID 1 repairs them live), among the last of every step of
// the run (the step's writes, whole), and among all, until the budget is spent.
func (c *cutRun) budget(points []cutPoint) map[int]bool {
	boot := map[int]bool{}
	switch os.Getenv("EDGEGATE_POWERCUTS") {
	case "offline": // a developer's quick look at every cut point's disk; boots none
		return boot
	case "all":
		for _, p := range points {
			boot[p.n] = true
		}
		return boot
	}
	var damaged, last []cutPoint
	for i, p := range points {
		if p.damaged {
			damaged = append(damaged, p)
		}
		if i == len(points)-1 || points[i+1].step != p.step {
			last = append(last, p)
		}
	}
	spaced := func(set []cutPoint, limit int) {
		for stride := len(set); len(boot) < limit && stride > 1; stride /= 2 {
			for i := stride / 2; i < len(set) && len(boot) < limit; i += stride {
				boot[set[i].n] = true
			}
		}
		for i := 0; i < len(set) && len(boot) < limit; i++ { // a set of one, or gaps left
			boot[set[i].n] = true
		}
	}
	spaced(damaged, bootBudget/2)
	spaced(last, bootBudget)
	spaced(points, bootBudget)
	return boot
}

// expect is what a boot after a cut before operation op must show: the firmware running
// (slot and version) and the newest attempt of its update history, each one of a set.
type expect struct {
	running []update.Firmware
	// history lists acceptable newest attempts as "version phase"; "" is no attempt yet.
	history []string
	// staged are the versions that may be left staged (pending): the power went after the
	// slot was written and verified, before the switch to it.
	staged []string
}

func (c *cutRun) expect(op int) expect {
	factory := update.Firmware{Slot: layout.SlotA, Version: "v1.0.0"}
	good := update.Firmware{Slot: layout.SlotB, Version: "v1.1.0"}
	failed := func(v string) []string {
		return []string{v + " " + string(update.PhaseInterrupted), v + " " + string(update.PhaseRolledBack), v + " " + string(update.PhaseFailed)}
	}
	committed := "v1.1.0 " + string(update.PhaseCommitted)
	switch {
	case op < c.marks["good-committed"]:
		// Before the commit is durable: the old firmware, the update failed or never
		// recorded; or the new one, committed by a trial boot after the cut.
		return expect{[]update.Firmware{factory, good}, append(failed("v1.1.0"), "", committed), []string{"v1.1.0"}}
	case op < c.marks["bad-upload"]:
		return expect{running: []update.Firmware{good}, history: []string{committed}}
	case op < c.marks["bad-rolled-back"]:
		return expect{[]update.Firmware{good}, append(failed(c.bad), committed), []string{c.bad}}
	default:
		return expect{running: []update.Firmware{good}, history: []string{c.bad + " " + string(update.PhaseRolledBack)}}
	}
}

// cutStep names the step of the run a console line begins, or returns "": the boot, the
// update's progress, the reboots and the panics.
func cutStep(line string) string {
	i := strings.Index(line, "EDGEGATE-")
	if i < 0 {
		return ""
	}
	f := strings.Fields(line[i:])
	switch f[0] {
	case "EDGEGATE-BOOT-START", "EDGEGATE-READY", "EDGEGATE-REBOOT", "EDGEGATE-PANICINIT":
		return f[0]
	case "EDGEGATE-UPDATE":
		if len(f) > 1 {
			return f[0] + " " + f[1]
		}
	}
	return ""
}

// replay rebuilds the disk a cut leaves in dir.
func (c *cutRun) replay(t *testing.T, p cutPoint, dir string) (string, *nbddisk.Report) {
	t.Helper()
	disk := filepath.Join(dir, "disk.img")
	copySparse(t, c.base, disk)
	rep, err := nbddisk.Replay(disk, c.ops, p.op, nbddisk.KeepRandom(cutSeed(p)))
	if err != nil {
		t.Fatal(err)
	}
	return disk, rep
}

// cutSeed is the seed of a cut point's policy: fixed, so that a run can be repeated.
func cutSeed(p cutPoint) uint64 { return uint64(p.n + 1) }

// offlineCheck rebuilds the disk a cut leaves and looks at its ESP without booting it.
func (c *cutRun) offlineCheck(t *testing.T, p *cutPoint) {
	t.Helper()
	dir := t.TempDir()
	disk, rep := c.replay(t, *p, dir)
	defer os.Remove(disk)
	p.summary = fmt.Sprintf("cut %d before op %d (%s, seed %d): %d pending writes: %d lost, %d kept, %d torn",
		p.n, p.op, p.step, cutSeed(*p), len(rep.Outcomes), rep.Count(nbddisk.Lost), rep.Count(nbddisk.Kept), rep.Count(nbddisk.Torn))
	st, err := c.offline(disk, dir)
	if err == nil {
		st.data, err = dataSuperblock(disk)
	}
	if err != nil {
		t.Errorf("%s: %v", p.summary, err)
		return
	}
	p.damaged = st.fsck != "clean"
	p.summary += fmt.Sprintf("; fsck.fat: %s; the boot loader finds %v; PID 1's repair: %s; entries then %v; data partition's superblock: %s",
		st.fsck, st.loader, st.repair, st.entries, st.data)
	t.Logf("%s", p.summary)
}

// bootCheck rebuilds the disk a cut leaves and boots it: a good slot must come up with its
// data partition mounted, the update history must say what happened, and fsck.fat must
// find the ESP clean afterwards.
func (c *cutRun) bootCheck(t *testing.T, p cutPoint) {
	t.Helper()
	dir := t.TempDir()
	disk, _ := c.replay(t, p, dir)
	start := time.Now()
	got, lines, err := c.bootCut(disk, filepath.Join(dir, "vars.fd"))
	if err == nil {
		err = c.expect(p.op).check(got)
	}
	if err == nil {
		// PID 1 repaired what the cut left before it mounted the ESP, and nothing the boot
		// wrote broke it again.
		if after, ferr := c.fsckESP(disk, dir); ferr != nil {
			err = ferr
		} else if after != "clean" {
			err = fmt.Errorf("after the boot, fsck.fat finds: %s", after)
		}
	}
	if err != nil {
		t.Errorf("boot after %s: %v\nconsole:\n%s", p.summary, err, strings.Join(lines, "\n"))
		return
	}
	h := "no attempt"
	if len(got.History) > 0 {
		h = got.History[0].To.Version + " " + string(got.History[0].Phase)
	}
	if got.Pending != nil {
		h += ", " + got.Pending.To.Version + " " + string(got.Pending.Phase)
	}
	repaired := "clean"
	for _, l := range lines {
		if i := strings.Index(l, "EDGEGATE-ESP-REPAIRED"); i >= 0 {
			repaired = strings.TrimSpace(l[i:])
		}
	}
	t.Logf("boot after cut %d (%s): slot %s %s, newest attempt %s, ESP at boot: %s, in %v",
		p.n, p.step, got.Slot, got.Version, h, repaired, time.Since(start).Round(time.Second))
}

// cutState is what a cut left on the ESP, looked at offline.
type cutState struct {
	fsck    string   // what fsck.fat says of it
	loader  []string // the boot entries as the boot loader finds them, its default first
	repair  string   // what PID 1's check and repair does to it (on a copy)
	entries []string // the boot entries after that repair
	data    string   // what PID 1's check of the data partition's superblock does
}

// dataSuperblock runs PID 1's check of the data partition's ext4 superblock on the disk a
// cut left (the kernel refuses to mount one whose checksum a torn write broke): it must
// find the superblock sound or make it so.
func dataSuperblock(disk string) (string, error) {
	t, err := image.ReadDiskTable(disk)
	if err != nil {
		return "", err
	}
	p, ok := t.Partition(layout.DataPartName)
	if !ok {
		return "", fmt.Errorf("no partition named %s", layout.DataPartName)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	what, err := pid1.RepairExt4Superblock(partitionDev{f, p.Offset()})
	switch {
	case err != nil:
		return "", fmt.Errorf("the data partition's superblock: %w", err)
	case what == "":
		return "sound", nil
	}
	return what, nil
}

// partitionDev is one partition of a disk image file.
type partitionDev struct {
	f   *os.File
	off int64
}

func (d partitionDev) ReadAt(p []byte, at int64) (int, error)  { return d.f.ReadAt(p, d.off+at) }
func (d partitionDev) WriteAt(p []byte, at int64) (int, error) { return d.f.WriteAt(p, d.off+at) }
func (d partitionDev) Sync() error                             { return d.f.Sync() }

// offline looks at the ESP a cut left without booting: fsck.fat's findings, the entries
// as the boot loader finds them (it must boot a committed slot by default), then PID 1's
// repair run on a copy of the partition, after which fsck.fat must find nothing and the
// default must still be a committed slot.
func (c *cutRun) offline(disk, dir string) (cutState, error) {
	var st cutState
	part, err := c.extractESP(disk, dir)
	if err != nil {
		return st, err
	}
	defer os.Remove(part)
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	st.fsck = fsckFAT(ctx, part)
	// What systemd-boot finds: the ESP as the cut left it, before PID 1 runs.
	f, err := os.OpenFile(part, os.O_RDWR, 0)
	if err != nil {
		return st, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return st, err
	}
	esp := image.ESP{Disk: part, Partition: image.Partition{LastLBA: uint64(size/image.SectorSize) - 1}}
	if st.loader, err = bootsByDefault(ctx, esp); err != nil {
		f.Close()
		return st, fmt.Errorf("as the boot loader finds the ESP (before PID 1's repair): %w", err)
	}
	if err != nil {
		return st, err
	}
	rep, err := pid1.RepairESP(f, size)
	st.repair = "clean"
	if !rep.Clean() {
		st.repair = rep.String()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, fmt.Errorf("PID 1's repair: %w", err)
	}
	if after := fsckFAT(ctx, part); after != "clean" {
		return st, fmt.Errorf("after PID 1's repair, fsck.fat finds: %s", after)
	}
	if st.entries, err = bootsByDefault(ctx, esp); err != nil {
		return st, fmt.Errorf("after PID 1's repair: %w", err)
	}
	return st, nil
}

// bootsByDefault reads the ESP's entries as systemd-boot does with no one-shot armed and
// checks that it boots a committed slot: no entry may have tries left (it would be booted
// by default, and after a torn rename of its counter, forever), and the first in the
// loader's order must be committed. Entries whose content does not parse are skipped, as
// the loader skips them. It returns the entries' names, the default first.
func bootsByDefault(ctx context.Context, esp image.ESP) ([]string, error) {
	names, err := esp.Entries(ctx)
	if err != nil {
		return nil, fmt.Errorf("the entries cannot be read: %w", err)
	}
	var entries []layout.Entry
	for _, n := range names {
		_, tries, err := layout.ParseFileName(n)
		if err != nil {
			continue
		}
		if tries != nil && tries.Left > 0 {
			return names, fmt.Errorf("entry %s has tries left: the boot loader boots it by default", n)
		}
		data, err := esp.ReadFile(ctx, layout.EntryPath(n))
		if err != nil {
			continue
		}
		if e, err := layout.ParseEntry(n, data); err == nil {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return names, fmt.Errorf("no entry the boot loader can boot: %v", names)
	}
	ordered := layout.Order(entries)
	out := []string{ordered[0].FileName()}
	for _, n := range names {
		if n != out[0] {
			out = append(out, n)
		}
	}
	if ordered[0].Tries != nil {
		return out, fmt.Errorf("the boot loader boots %s by default, a slot not committed", ordered[0].FileName())
	}
	return out, nil
}

// fsckESP is what fsck.fat says of the disk's ESP.
func (c *cutRun) fsckESP(disk, dir string) (string, error) {
	part, err := c.extractESP(disk, dir)
	if err != nil {
		return "", err
	}
	defer os.Remove(part)
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	return fsckFAT(ctx, part), nil
}

// extractESP copies the disk's ESP to a file of its own in dir.
func (c *cutRun) extractESP(disk, dir string) (string, error) {
	esp, err := image.OpenESP(disk)
	if err != nil {
		return "", err
	}
	part := filepath.Join(dir, "esp.img")
	return part, copyRange(disk, part, esp.Partition.Offset(), esp.Partition.Size())
}

// fsckFAT is what fsck.fat -n says of a FAT file system image: "clean", or its findings on
// one line. What a cut during any write to the ESP leaves and fsck calls harmless is left
// out: the dirty flag Linux sets while the ESP is writable (also the one byte in which the
// boot sector then differs from its backup).
func fsckFAT(ctx context.Context, part string) string {
	fsck, err := image.LookTool("fsck.fat") // /usr/sbin, which a user's PATH may lack
	if err != nil {
		return err.Error()
	}
	out, err := exec.CommandContext(ctx, fsck, "-n", part).CombinedOutput()
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.HasPrefix(l, "fsck.fat "), strings.HasPrefix(l, part),
			strings.Contains(l, "differences between boot sector and its backup"), strings.Contains(l, "mostly harmless"),
			strings.HasPrefix(l, "Differences: (offset:original/backup)"), l == "65:01/00", l == "Not automatically fixing this.",
			strings.HasPrefix(l, "Dirty bit is set"), l == "Automatically removing dirty bit.", l == "Leaving filesystem unchanged.":
		default:
			found = append(found, l)
		}
	}
	switch {
	case len(found) > 0:
		return strings.Join(found, " | ")
	case err != nil && !isExit(err, 1):
		return err.Error()
	}
	return "clean"
}

// isExit says err is a program's exit with code.
func isExit(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

func (w expect) check(st update.Status) error {
	now := update.Firmware{Slot: st.Slot, Version: st.Version}
	if !slices.Contains(w.running, now) {
		return fmt.Errorf("running %+v, want one of %+v", now, w.running)
	}
	h := ""
	if len(st.History) > 0 {
		h = st.History[0].To.Version + " " + string(st.History[0].Phase)
	}
	if !slices.Contains(w.history, h) {
		return fmt.Errorf("newest attempt %q, want one of %q", h, w.history)
	}
	if st.Version == "v1.0.0" && strings.HasSuffix(h, " "+string(update.PhaseCommitted)) {
		return fmt.Errorf("the factory firmware runs, but the history says %q", h)
	}
	if p := st.Pending; p != nil && (p.Phase != update.PhaseStaged || !slices.Contains(w.staged, p.To.Version)) {
		return fmt.Errorf("an attempt is still pending: %+v", p)
	}
	if !st.Available {
		return fmt.Errorf("updates unavailable: %s", st.Problem)
	}
	return nil
}

// bootCut powers a gateway with the disk on (a fresh NVRAM: the machine's variables are not
// on the disk that lost writes) and waits until it has settled: the data partition mounted,
// the first sync done, no trial boot under way. It returns the update status then and the
// console.
func (c *cutRun) bootCut(disk, vars string) (update.Status, []string, error) {
	u := &updateTest{releases: c.releases, name: "cut", disk: disk, vars: vars, port: c.port}
	vm, err := Start(c.ctx, Options{
		Board: c.board, UEFIVars: vars, AllowReboot: true, Disks: []Disk{{Path: disk}},
		NICs:    []NIC{{Netdev: fmt.Sprintf("user,restrict=on,hostfwd=tcp:127.0.0.1:%d-:443", c.port)}},
		Timeout: 8 * time.Minute,
	})
	if err != nil {
		return update.Status{}, nil, err
	}
	u.vm = vm
	defer func() {
		vm.Kill()
		_, _ = vm.Wait()
	}()
	lines := func() []string {
		var out []string
		for _, l := range vm.Lines() {
			out = append(out, l.Text)
		}
		return out
	}
	if _, err := vm.WaitFor("EDGEGATE-DATA"); err != nil {
		return update.Status{}, lines(), fmt.Errorf("the data partition: %w", err)
	}
	if _, err := vm.WaitFor("EDGEGATE-READY"); err != nil {
		return update.Status{}, lines(), err
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		st, err := u.statusErr()
		if err == nil && st.Trial == nil && !st.Rebooting {
			return st, lines(), nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("still in a trial: %+v", st.Trial)
			}
			return st, lines(), fmt.Errorf("not settled: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// statusErr is status for a gateway that may be rebooting.
func (u *updateTest) statusErr() (update.Status, error) {
	resp, err := u.request(http.MethodGet, "/api/update", nil)
	if err != nil {
		return update.Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return update.Status{}, fmt.Errorf("GET /api/update: %s", resp.Status)
	}
	var st update.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// copyRange copies size bytes at off of a file to a new file.
func copyRange(from, to string, off, size int64) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(in, off, size)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copySparse copies a disk image, keeping its holes.
func copySparse(t *testing.T, from, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", from, to).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", from, err, out)
	}
}

// TestCutBudget: the boots spread over the run, take the damaged states first, and stay
// within the budget.
func TestCutBudget(t *testing.T) {
	t.Setenv("EDGEGATE_POWERCUTS", "")
	var points []cutPoint
	for i := range 90 {
		points = append(points, cutPoint{n: i, step: fmt.Sprintf("step %d", i/6), damaged: i%15 == 3})
	}
	boot := (&cutRun{}).budget(points)
	var damaged, firstHalf int
	for n := range boot {
		if points[n].damaged {
			damaged++
		}
		if n < 45 {
			firstHalf++
		}
	}
	if len(boot) != bootBudget || damaged != bootBudget/2 || firstHalf < bootBudget/3 || firstHalf > 2*bootBudget/3 {
		t.Errorf("boots %v: %d damaged, %d in the first half", boot, damaged, firstHalf)
	}
	t.Setenv("EDGEGATE_POWERCUTS", "all")
	if boot := (&cutRun{}).budget(points); len(boot) != len(points) {
		t.Errorf("all: %d boots", len(boot))
	}
}

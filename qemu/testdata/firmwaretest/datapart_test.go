package firmwaretest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The data partition's side of the contract with qemu/firmware_test.go, which gives the
// guest one disk or none: its "boot" run attaches an ext4 file system labelled
// edgegate-data whose config.yaml sets healthzBindAddress to dataHealthz; its "panic" run
// attaches nothing.
const (
	dataMountpoint = "/var/lib/edgegate"
	dataDevice     = "/dev/vda"
	// dataHealthz is the partition's config.yaml's healthzBindAddress; defaultHealthz is
	// the daemon's default, which the image (with no config.yaml of its own) keeps.
	dataHealthz    = "127.0.0.1:10257"
	defaultHealthz = "127.0.0.1:10256"
	// guestFile and guestFileContent are what this test writes to the partition, without
	// fsync: only PID 1's sync and unmount at power-off take it to the disk, where the host
	// reads it back (qemu/firmware_test.go has the same two constants).
	guestFile        = "/written-by-the-guest-test"
	guestFileContent = "written inside the guest before the power-off\n"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	source, fstype string
	options        []string // per mount: rw, nosuid, ...
	superOptions   []string // per file system: errors=..., ...
}

// mountAt returns the mount on target.
func mountAt(t *testing.T, target string) (mountEntry, bool) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found mountEntry
	ok := false
	for _, line := range strings.Split(string(raw), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, sep := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !sep || len(f) < 6 || len(g) < 3 || f[4] != target {
			continue
		}
		// The last mount on a target is the one in use.
		found = mountEntry{source: g[1], fstype: g[0], options: strings.Split(f[5], ","), superOptions: strings.Split(g[2], ",")}
		ok = true
	}
	return found, ok
}

// TestDataPartition: with a disk, PID 1 mounted it on the daemon's state directory with
// the flags that keep programs and devices off it, and the daemon runs with the
// partition's config.yaml; without one, nothing is mounted there and the daemon keeps its
// defaults.
func TestDataPartition(t *testing.T) {
	disks, err := filepath.Glob("/sys/class/block/vd*")
	if err != nil {
		t.Fatal(err)
	}
	mnt, mounted := mountAt(t, dataMountpoint)
	if len(disks) == 0 {
		if mounted {
			t.Errorf("no disk, yet %s is mounted: %+v", dataMountpoint, mnt)
		}
		checkHealthz(t, defaultHealthz, dataHealthz)
		return
	}
	if !mounted {
		t.Fatalf("disks %v, but nothing is mounted on %s", disks, dataMountpoint)
	}
	t.Logf("%s on %s: %+v", mnt.source, dataMountpoint, mnt)
	if mnt.source != dataDevice || mnt.fstype != "ext4" {
		t.Errorf("%s is %s from %s, want ext4 from %s", dataMountpoint, mnt.fstype, mnt.source, dataDevice)
	}
	for _, o := range []string{"rw", "nosuid", "nodev", "noexec", "noatime"} {
		if !slices.Contains(mnt.options, o) {
			t.Errorf("%s is mounted %v, without %s", dataMountpoint, mnt.options, o)
		}
	}
	// The host made the file system with errors=continue: the mount's own setting shows.
	if !slices.Contains(mnt.superOptions, "errors=remount-ro") {
		t.Errorf("%s's file system options %v lack errors=remount-ro", dataMountpoint, mnt.superOptions)
	}
	checkHealthz(t, dataHealthz, defaultHealthz)
	if err := os.WriteFile(dataMountpoint+guestFile, []byte(guestFileContent), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkHealthz: the daemon's /healthz answers on addr, and nothing listens on other.
func checkHealthz(t *testing.T, addr, other string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/healthz", addr))
	if err != nil {
		t.Errorf("the daemon's healthz on %s: %v", addr, err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET http://%s/healthz: %s", addr, resp.Status)
		}
	}
	conn, err := net.DialTimeout("tcp", other, 10*time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("something listens on %s", other)
	} else if !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("dialing %s: %v, want connection refused", other, err)
	}
}

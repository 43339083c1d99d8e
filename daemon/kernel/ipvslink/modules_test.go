package ipvslink

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// moduleTree writes a /lib/modules/<release> index under a temporary root, with the
// dependency chain of Debian's kernels: ip_vs_rr -> ip_vs -> nf_conntrack -> nf_defrag_*,
// libcrc32c (which needs crc32c first, a soft dependency).
func moduleTree(t *testing.T, loaded ...string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "lib/modules/6.1.0-28-amd64")
	files := map[string]string{
		"modules.dep": `kernel/net/netfilter/ipvs/ip_vs_rr.ko: kernel/net/netfilter/ipvs/ip_vs.ko kernel/net/netfilter/nf_conntrack.ko kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/ipvs/ip_vs_sh.ko.xz: kernel/net/netfilter/ipvs/ip_vs.ko kernel/net/netfilter/nf_conntrack.ko kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/netfilter/nf_conntrack.ko kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/nf_conntrack.ko: kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/lib/libcrc32c.ko
kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko:
kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko:
kernel/lib/libcrc32c.ko:
kernel/crypto/crc32c_generic.ko:
kernel/arch/x86/crypto/crc32c-intel.ko:
`,
		"modules.softdep": "# Soft dependencies extracted from modules themselves.\nsoftdep libcrc32c pre: crc32c-intel post: nothing\n",
		"modules.builtin": "kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko\n",
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range loaded {
		if err := os.MkdirAll(filepath.Join(root, "sys/module", m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type loads struct {
	root  string
	files []string
	fail  map[string]error
}

func (l *loads) load(file string, compressed bool) error {
	rel := strings.TrimPrefix(file, l.root+"/lib/modules/6.1.0-28-amd64/")
	if compressed {
		rel += " (compressed)"
	}
	l.files = append(l.files, rel)
	if err := l.fail[moduleName(file)]; err != nil {
		return err
	}
	// Loaded: /sys/module says so from now on.
	return os.MkdirAll(filepath.Join(l.root, "sys/module", moduleName(file)), 0o755)
}

func TestModulesLoadInDependencyOrder(t *testing.T) {
	root := moduleTree(t)
	l := &loads{root: root}
	m := &Modules{Root: root, Release: "6.1.0-28-amd64", Load: l.load}
	if err := m.Ensure("ip_vs", "ip_vs_rr", "ip_vs_sh"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/arch/x86/crypto/crc32c-intel.ko", // libcrc32c's soft dependency first
		"kernel/lib/libcrc32c.ko",
		"kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko", // nf_defrag_ipv4 is built in
		"kernel/net/netfilter/nf_conntrack.ko",
		"kernel/net/netfilter/ipvs/ip_vs.ko",
		"kernel/net/netfilter/ipvs/ip_vs_rr.ko",
		"kernel/net/netfilter/ipvs/ip_vs_sh.ko.xz (compressed)",
	}
	if d := cmp.Diff(want, l.files); d != "" {
		t.Errorf("load order (-want +got):\n%s", d)
	}
}

func TestModulesAlreadyLoadedNeedNoIndex(t *testing.T) {
	root := t.TempDir() // no /lib/modules at all, as on the firmware
	if err := os.MkdirAll(filepath.Join(root, "sys/module/ip_vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &loads{root: root}
	if err := (&Modules{Root: root, Release: "6.1.0-28-amd64", Load: l.load}).Ensure("ip_vs"); err != nil || len(l.files) != 0 {
		t.Errorf("loaded module: err %v, loads %q", err, l.files)
	}
	err := (&Modules{Root: root, Release: "6.1.0-28-amd64", Load: l.load}).Ensure("ip_vs_rr")
	if err == nil || !strings.Contains(err.Error(), "kernel module ip_vs_rr: not loaded, and no module index") ||
		!strings.Contains(err.Error(), "lib/modules/6.1.0-28-amd64/modules.dep") {
		t.Errorf("missing index: %v", err)
	}
}

func TestModuleErrors(t *testing.T) {
	root := moduleTree(t, "libcrc32c", "nf_defrag_ipv6")
	l := &loads{root: root, fail: map[string]error{"nf_conntrack": unix.ENOEXEC}}
	m := &Modules{Root: root, Release: "6.1.0-28-amd64", Load: l.load}
	err := m.Ensure("ip_vs", "ip_vs_mh")
	for _, want := range []string{
		"kernel module ip_vs: dependency nf_conntrack: load " + root + "/lib/modules/6.1.0-28-amd64/kernel/net/netfilter/nf_conntrack.ko: exec format error",
		"kernel module ip_vs_mh: not built in and not in /lib/modules/6.1.0-28-amd64/modules.dep",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if !errors.Is(err, unix.ENOEXEC) {
		t.Errorf("the kernel's error is not wrapped: %v", err)
	}
	if want := []string{"kernel/net/netfilter/nf_conntrack.ko"}; !cmp.Equal(want, l.files) {
		t.Errorf("loaded %q; already loaded dependencies must be skipped, nothing after a failure loaded", l.files)
	}
}

// A module that another program loaded meanwhile answers EEXIST: that is success.
func TestModuleLoadedMeanwhile(t *testing.T) {
	root := moduleTree(t, "libcrc32c", "nf_defrag_ipv6", "nf_conntrack", "ip_vs")
	l := &loads{root: root, fail: map[string]error{"ip_vs_rr": unix.EEXIST}}
	if err := (&Modules{Root: root, Release: "6.1.0-28-amd64", Load: l.load}).Ensure("ip_vs_rr"); err != nil {
		t.Errorf("EEXIST counted as a failure: %v", err)
	}
}

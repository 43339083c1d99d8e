package ipvslink

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSysctls(t *testing.T, root string, vals map[string]string) {
	t.Helper()
	for name, v := range vals {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEnsureSysctls(t *testing.T) {
	root := t.TempDir()
	vals := map[string]string{}
	for _, s := range Settings("6.1.0") {
		vals[s.Name] = "7"
	}
	writeSysctls(t, root, vals)
	changed, err := EnsureSysctls(ProcSys{Root: root}, "6.1.0-28-cloud-amd64")
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 7 {
		t.Errorf("changed %q, want all 7", changed)
	}
	for name, want := range map[string]string{
		"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/conn_reuse_mode": "1", "net/ipv4/vs/expire_nodest_conn": "1",
		"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/conf/all/arp_ignore": "1",
		"net/ipv4/conf/all/arp_announce": "2", "net/ipv4/ip_forward": "1",
	} {
		if got, _ := (ProcSys{Root: root}).Read(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if changed, err := EnsureSysctls(ProcSys{Root: root}, "6.1.0"); err != nil || len(changed) != 0 {
		t.Errorf("second run: changed %q, err %v", changed, err)
	}
}

func TestConnReuseModeByKernel(t *testing.T) {
	for release, want := range map[string]string{"4.19.0-26-amd64": "0", "5.8.18": "0", "5.9.0": "1", "5.10.0-30-amd64": "1",
		"6.1.0-28-cloud-amd64": "1", "6.18.44-fc-v769": "1", "garbage": "1"} {
		for _, s := range Settings(release) {
			if s.Name == "net/ipv4/vs/conn_reuse_mode" && s.Value != want {
				t.Errorf("%s: conn_reuse_mode %s, want %s", release, s.Value, want)
			}
		}
	}
}

// Without ip_vs the net/ipv4/vs directory does not exist: that is ErrNotAvailable, and
// nothing after it is written.
func TestSysctlsWithoutIPVS(t *testing.T) {
	root := t.TempDir()
	writeSysctls(t, root, map[string]string{"net/ipv4/ip_forward": "0", "net/ipv4/conf/all/arp_ignore": "0"})
	_, err := EnsureSysctls(ProcSys{Root: root}, "6.1.0")
	if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "net/ipv4/vs/conntrack") {
		t.Fatalf("err %v", err)
	}
	if got, _ := (ProcSys{Root: root}).Read("net/ipv4/ip_forward"); got != "0" {
		t.Errorf("ip_forward written without ip_vs: %s", got)
	}
}

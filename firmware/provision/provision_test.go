package provision

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/internal/prereq"
)

// testCert returns a self-signed certificate and its key, PEM.
func testCert(t *testing.T, cn string) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func goodIdentity(t *testing.T) Identity {
	ca, _ := testCert(t, "cluster-ca")
	cert, key := testCert(t, "gw1")
	return Identity{
		APIServer: "https://10.0.0.1:6443", Token: "abcdef.0123456789abcdef\n", CA: ca,
		Config:        []byte("proxyMode: iptables\nzone: site-7\n"),
		Network:       []byte("ip:\n- eth0:192.0.2.10/24:192.0.2.1\n- eth1:dhcp\n"),
		DashboardCert: cert, DashboardKey: key, DashboardToken: "0123456789abcdef0123\n",
	}
}

func TestFiles(t *testing.T) {
	id := goodIdentity(t)
	files, err := Files(id)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]File{}
	var names []string
	for _, f := range files {
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	if got, want := strings.Join(names, " "), "token ca.crt dashboard.crt dashboard.key dashboard-token network.yaml config.yaml"; got != want {
		t.Errorf("files %s, want %s", got, want)
	}
	for name, mode := range map[string]os.FileMode{"token": 0o600, "dashboard.key": 0o600, "dashboard-token": 0o600, "ca.crt": 0o644, "config.yaml": 0o644} {
		if byName[name].Mode != mode {
			t.Errorf("%s: mode %o, want %o", name, byName[name].Mode, mode)
		}
	}
	if got := string(byName["token"].Data); got != "abcdef.0123456789abcdef\n" {
		t.Errorf("token %q", got)
	}
	if got := string(byName["dashboard-token"].Data); got != "0123456789abcdef0123\n" {
		t.Errorf("dashboard-token %q", got)
	}
	var config map[string]any
	if err := yaml.Unmarshal(byName["config.yaml"].Data, &config); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"proxyMode": "iptables", "zone": "site-7", "apiServer": "https://10.0.0.1:6443",
		"tokenFile": "/var/lib/edgegate/token", "caFile": "/var/lib/edgegate/ca.crt",
		"dashboardTLSCertFile": "/var/lib/edgegate/dashboard.crt", "dashboardTLSPrivateKeyFile": "/var/lib/edgegate/dashboard.key",
		"dashboardTokenFile": "/var/lib/edgegate/dashboard-token",
	} {
		if config[k] != v {
			t.Errorf("config.yaml %s = %v, want %v", k, config[k], v)
		}
	}

	// Standalone: a network.yaml alone.
	if files, err := Files(Identity{Network: id.Network}); err != nil || len(files) != 1 || files[0].Name != "network.yaml" {
		t.Errorf("network only: %v, %v", files, err)
	}
}

// TestFilesRefused: each wrong input is refused with the field or file named, and the
// daemon's own parser judges config.yaml.
func TestFilesRefused(t *testing.T) {
	otherCert, _ := testCert(t, "other")
	for name, tc := range map[string]struct {
		edit func(*Identity)
		want string
	}{
		"http api server":        {func(id *Identity) { id.APIServer = "http://10.0.0.1:6443" }, `api server "http://10.0.0.1:6443": want an https:// URL`},
		"no api server":          {func(id *Identity) { id.APIServer = "" }, `api server "": want an https:// URL`},
		"token with spaces":      {func(id *Identity) { id.Token = "abc def" }, "token: want one bearer token"},
		"no token":               {func(id *Identity) { id.Token = "" }, "token: want one bearer token"},
		"ca not pem":             {func(id *Identity) { id.CA = []byte("hello") }, "ca: not PEM"},
		"ca a key":               {func(id *Identity) { _, id.CA = testCert(t, "x") }, `ca: a PEM block of type "EC PRIVATE KEY"`},
		"key mismatch":           {func(id *Identity) { id.DashboardCert = otherCert }, "dashboard certificate and key: tls: private key does not match public key"},
		"cert without key":       {func(id *Identity) { id.DashboardKey = nil }, "dashboard certificate and key: give both or neither"},
		"short dashboard token":  {func(id *Identity) { id.DashboardToken = "0123456789" }, "dashboard token: want one token of at least 16 characters"},
		"dashboard token spaces": {func(id *Identity) { id.DashboardToken = "01234567 89abcdef01" }, "dashboard token: want one token"},
		"network entry":          {func(id *Identity) { id.Network = []byte("ip: [eth0:300.0.0.1/24]\n") }, `network.yaml: ip entry "eth0:300.0.0.1/24"`},
		"network key":            {func(id *Identity) { id.Network = []byte("ips: [eth0:dhcp]\n") }, "network.yaml: error unmarshaling JSON"},
		"config field":           {func(id *Identity) { id.Config = []byte("proxyMod: nftables\n") }, `config.yaml: the daemon refuses it: error unmarshaling JSON: while decoding JSON: json: unknown field "proxyMod"`},
		"config value":           {func(id *Identity) { id.Config = []byte("proxyMode: bpf\n") }, "config.yaml: the daemon refuses it: --proxy-mode"},
		"config conflict":        {func(id *Identity) { id.Config = []byte("apiServer: https://10.9.9.9:6443\n") }, "config.yaml: apiServer is https://10.9.9.9:6443 there, but provisioning sets it to https://10.0.0.1:6443"},
		"nothing":                {func(id *Identity) { *id = Identity{} }, "nothing to write"},
	} {
		t.Run(name, func(t *testing.T) {
			id := goodIdentity(t)
			tc.edit(&id)
			_, err := Files(id)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
}

// testDisk writes a disk image as the image builder lays it out (a GPT with the ESP and
// the data partition, ext4 made by mke2fs at the partition's offset) with a file the
// gateway wrote, and returns its path.
func testDisk(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs"} {
		_, err := image.LookTool(tool)
		prereq.NoErr(t, err)
	}
	tb := image.Table{
		DiskGUID: image.MustParseGUID("11111111-2222-4333-8444-555555555555"), Sectors: 40 << 20 / image.SectorSize,
		Partitions: []image.Partition{
			{Number: 1, Type: image.ESPType, GUID: image.MustParseGUID("21111111-2222-4333-8444-555555555555"), Name: layout.ESPPartName, FirstLBA: 2048, LastLBA: 4095},
			{Number: 2, Type: image.LinuxFilesystemType, GUID: image.MustParseGUID("31111111-2222-4333-8444-555555555555"), Name: layout.DataPartName, FirstLBA: 4096, LastLBA: 40<<20/image.SectorSize - 2048},
		},
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	f, err := image.CreateDisk(disk, tb)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	content := filepath.Join(dir, "content")
	if err := os.MkdirAll(content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(content, "update-state.json"), []byte(`{"slot":"a"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	data := tb.Partitions[1]
	mke2fs, err := image.LookTool("mke2fs")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(mke2fs, "-q", "-t", "ext4", "-L", layout.DataPartName, "-d", content,
		"-E", "offset="+itoa(data.Offset()), disk, itoa(data.Size()>>10)+"k").CombinedOutput()
	if err != nil {
		t.Fatalf("mke2fs: %v: %s", err, out)
	}
	return disk
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestWriteImage provisions an image file, then provisions it again with other values:
// the files are written, replaced, read back, and the gateway's own files stay.
func TestWriteImage(t *testing.T) {
	disk := testDisk(t)
	target, err := Open(disk, System{})
	if err != nil {
		t.Fatal(err)
	}
	if target.Device || target.Data.Number != 2 {
		t.Errorf("target %+v", target)
	}
	ctx := context.Background()
	id := goodIdentity(t)
	files, err := Files(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Write(ctx, files); err != nil {
		t.Fatal(err)
	}
	id.Token = "zzzzzz.0123456789abcdef"
	id.Network = nil
	again, err := Files(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Write(ctx, again); err != nil {
		t.Fatal(err)
	}
	debugfs, err := image.LookTool("debugfs")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"token": "zzzzzz.0123456789abcdef\n", "update-state.json": `{"slot":"a"}`, "network.yaml": string(goodIdentity(t).Network)} {
		got, mode, err := target.read(ctx, debugfs, name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
		if name == "token" && mode != 0o600 {
			t.Errorf("token mode %o, want 600", mode)
		}
	}
	// e2fsck finds the file system clean.
	if e2fsck, err := image.LookTool("e2fsck"); err == nil {
		if out, err := exec.Command(e2fsck, "-fn", target.fsSpec()).CombinedOutput(); err != nil {
			t.Errorf("e2fsck: %v\n%s", err, out)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	blank := filepath.Join(dir, "blank.img")
	if err := os.WriteFile(blank, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(blank, System{}); err == nil || !strings.Contains(err.Error(), "no edgegate disk image on it") {
		t.Errorf("a blank file: %v", err)
	}
	if _, err := Open(dir, System{}); err == nil || !strings.Contains(err.Error(), "neither an image file nor a block device") {
		t.Errorf("a directory: %v", err)
	}
}

// fakeDisk lays out the host's view of a disk sdb with two partitions in a fake root, and
// returns the root and a stand-in device node for sdb.
func fakeDisk(t *testing.T, mountinfo string, holder bool) (System, string) {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"sys/class/block/sdb/dev":            "8:16\n",
		"sys/class/block/sdb/sdb1/dev":       "8:17\n",
		"sys/class/block/sdb/sdb1/partition": "1\n",
		"sys/class/block/sdb/sdb2/dev":       "8:18\n",
		"sys/class/block/sdb/sdb2/partition": "2\n",
		"sys/class/block/sdb1/partition":     "1\n",
		"proc/self/mountinfo":                mountinfo,
		"proc/swaps":                         "Filename\tType\tSize\tUsed\tPriority\n",
	}
	if holder {
		files["sys/class/block/sdb/sdb2/holders/dm-0"] = ""
	}
	for p, c := range files {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dev := filepath.Join(t.TempDir(), "sdb")
	if err := os.WriteFile(dev, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return System{Root: root}, dev
}

func TestCheckUnused(t *testing.T) {
	const rootMount = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
	sys, dev := fakeDisk(t, rootMount, false)
	if err := sys.checkUnused(dev); err != nil {
		t.Errorf("an unused disk: %v", err)
	}
	sys, dev = fakeDisk(t, rootMount+"40 22 8:17 / /media/stick rw - vfat /dev/sdb1 rw\n", false)
	if err := sys.checkUnused(dev); err == nil || !strings.Contains(err.Error(), "sdb1 is mounted on /media/stick") {
		t.Errorf("a disk with a mounted partition: %v", err)
	}
	sys, dev = fakeDisk(t, rootMount, true)
	if err := sys.checkUnused(dev); err == nil || !strings.Contains(err.Error(), "sdb2 is held by dm-0") {
		t.Errorf("a disk under LVM: %v", err)
	}
	part := filepath.Join(t.TempDir(), "sdb1")
	if err := os.WriteFile(part, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sys.checkUnused(part); err == nil || !strings.Contains(err.Error(), "is a partition: give the whole disk") {
		t.Errorf("a partition: %v", err)
	}
}

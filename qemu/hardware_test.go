package qemu

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
	"github.com/edgegate/edgegate/lab/labtest"
)

// hardwareBoards are the boards of real machines: their kernels are Debian's generic ones,
// their disks and NICs are not virtio.
var hardwareBoards = []string{"pc-x86_64", "generic-arm64"}

// TestHardwareGateway brings up a gateway of each hardware board as the README's "From zero
// to a gateway on real hardware" does, with everything around it real except the machine:
//
//   - the board's A/B disk image (slot A v1.0.0, image.Build as `make image`), provisioned
//     by the egprovision command itself with a real kube-apiserver's URL, the gateway's
//     token and the cluster's CA, network.yaml, config.yaml and the dashboard's token;
//   - booted through the board's UEFI firmware from its kind of disk (an NVMe SSD on
//     pc-x86_64, a USB stick on generic-arm64), with four e1000e NICs whose drivers PID 1
//     loads itself, on the taps of a lab (lab.Options.Taps): the client segments, the
//     backends' bridge and the uplink to the control plane, which runs in the lab's
//     upstream namespace;
//   - it joins the cluster (its Node Ready), serves the traffic matrix's ClusterIP, NodePort
//     and LoadBalancer rows (labtest.TrafficRows, applied to the API server) through those
//     NICs, takes a signed update uploaded to its dashboard through the same NICs and
//     commits it once healthy in the cluster, serves again, and rolls a release that
//     panics at every boot back by itself.
func TestHardwareGateway(t *testing.T) {
	eachBoard(t, hardwareBoards, func(tb testing.TB, b board.Board) {
		RequireUEFI(tb, b)
		RequireTools(tb, append(slices.Clone(image.Tools), image.Tool{Command: "debugfs", Package: "e2fsprogs"})...)
	}, 40*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		l := labtest.New(t, lab.Options{Prefix: "eghw", Taps: true})
		c := clustertest.Start(t, cluster.Options{
			NetNS: l.Upstream.NS, Address: lab.UpstreamIPv4,
			GatewayUser: cluster.DefaultGatewayUser, GatewayGroups: []string{"system:bootstrappers:edgegate"},
		})
		clustertest.ApplyFile(t, c.Client, "../deploy/rbac.yaml")
		rows := labtest.TrafficRows()
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: labtest.Namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			objs, err := cluster.Decode([]byte(row.Manifests))
			if err != nil {
				t.Fatalf("%s: %v", row.Name, err)
			}
			if _, err := cluster.Apply(ctx, c.Client, objs...); err != nil {
				t.Fatalf("%s: %v", row.Name, err)
			}
		}
		r := newReleases(ctx, t, b, []releaseSpec{
			{"v1.0.0", daemonPkg, "", nil}, {"v1.1.0", daemonPkg, "", nil}, {"v1.2.0-panics", panicInit, "", nil},
		}, nil)
		u := r.hardwareGateway(t, l, c)
		u.boot(t)
		defer u.shutDown()
		start := time.Now()
		u.waitFactory(t)
		waitNodeReady(ctx, t, c, lab.GatewayNodeName)
		checkDrivers(t, u.vm, append(expectedDrivers(b), b.QEMU.NIC))
		t.Logf("%s: ready, its dashboard answering and its Node Ready %v after power-on", b.Name, time.Since(start).Round(time.Millisecond))
		traffic := func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.Name, func(t *testing.T) { row.Check(t, l, nil) })
			}
		}
		if !t.Run("traffic", traffic) {
			return
		}
		if !t.Run("good", func(t *testing.T) { u.good(t, "v1.1.0", layout.SlotB, false) }) {
			return
		}
		waitNodeReady(ctx, t, c, lab.GatewayNodeName)
		t.Run("traffic-after-update", traffic)
		t.Run("bad", func(t *testing.T) { u.rollback(t, "v1.2.0-panics", layout.SlotA, "EDGEGATE-PANICINIT") })
	})
}

// hwConfig is the provisioned gateway's config.yaml: egprovision adds the cluster's fields
// and the dashboard token's file.
const hwConfig = `hostnameOverride: ` + lab.GatewayNodeName + `
nodeIPs: [10.200.1.1, "fd00:200:1::1"]
update:
  trialTimeout: 3m
`

// hardwareGateway makes the gateway's disk (slot A from v1.0.0, an empty data partition) and
// provisions it with the egprovision command, for c's API server and the taps of l.
func (r *releases) hardwareGateway(t *testing.T, l *lab.Lab, c *cluster.Cluster) *updateTest {
	t.Helper()
	dir := filepath.Join(r.dir, "gw")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	u := &updateTest{releases: r, name: r.board.Name, disk: filepath.Join(dir, "disk.img"), vars: filepath.Join(dir, "vars.fd"),
		start: l.Gateway.Start,
		dashboard: &dashboardAt{base: "https://" + lab.NodeIPv4.String(), client: &http.Client{Transport: &http.Transport{
			DialContext:     l.Client.DialContext,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the gateway's own certificate, as in TestUpdate
		}}}}
	for _, tap := range lab.TapNames {
		u.nics = append(u.nics, NIC{Netdev: "tap,ifname=" + tap + ",script=no,downscript=no"})
	}
	if _, err := image.Build(r.ctx, r.log, u.disk, image.Spec{Board: r.board, BootLoader: r.loader, DataDir: filepath.Join(dir, "data"),
		A: &image.Slot{Bundle: r.bundles["v1.0.0"], Keys: []bundle.PublicKey{r.pub}, Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"token": c.GatewayToken, "ca.crt": string(c.CAPEM), "config.yaml": hwConfig, "dashboard-token": dashboardToken,
		"network.yaml": "ip:\n- " + strings.Join(lab.TapGuestIPs, "\n- ") + "\n",
	}
	for name, content := range files {
		writeTestFile(t, filepath.Join(dir, name), []byte(content))
	}
	provision := filepath.Join(dir, "egprovision")
	if err := goBuild(r.ctx, runtime.GOARCH, "build", "github.com/edgegate/edgegate/firmware/cmd/egprovision", provision); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(r.ctx, provision, "-disk", u.disk, "-api-server", c.Server,
		"-token-file", filepath.Join(dir, "token"), "-ca-file", filepath.Join(dir, "ca.crt"),
		"-config", filepath.Join(dir, "config.yaml"), "-network", filepath.Join(dir, "network.yaml"),
		"-dashboard-token-file", filepath.Join(dir, "dashboard-token")).CombinedOutput()
	if err != nil {
		t.Fatalf("egprovision: %v\n%s", err, out)
	}
	t.Logf("egprovision:\n%s", out)
	return u
}

// checkDrivers requires the drivers PID 1 loaded for the devices it found (the console's
// EDGEGATE-DRIVERS marker) to include want.
func checkDrivers(t *testing.T, vm *VM, want []string) {
	t.Helper()
	lines := vm.Lines()
	i := slices.IndexFunc(lines, func(l Line) bool { return strings.HasPrefix(l.Text, "EDGEGATE-DRIVERS ") })
	if i < 0 {
		t.Fatal("no EDGEGATE-DRIVERS line on the console")
	}
	checkDriverList(t, lines[i].Text, want)
}

// checkDriverList requires the EDGEGATE-DRIVERS marker to list want.
func checkDriverList(t *testing.T, marker string, want []string) {
	t.Helper()
	drivers := strings.Split(strings.TrimPrefix(marker, "EDGEGATE-DRIVERS "), ",")
	for _, d := range want {
		if !slices.Contains(drivers, d) {
			t.Errorf("drivers loaded for the devices present %v, want %s among them", drivers, d)
		}
	}
}

// waitNodeReady waits until the Node called name is Ready in c.
func waitNodeReady(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	if err := cluster.WaitNodeReady(ctx, c.Client, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

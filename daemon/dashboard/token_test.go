package dashboard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

func TestLoadToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tok, path, generated, err := LoadToken("", dir)
	if err != nil || !generated || len(tok) != 40 || path != filepath.Join(dir, TokenFileName) {
		t.Fatalf("first start: %q %q %v %v; want a generated 40-character token in the state dir", tok, path, generated, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file %v %v, want mode 0600", fi.Mode(), err)
	}
	again, _, generated, err := LoadToken("", dir)
	if err != nil || generated || again != tok {
		t.Errorf("second start: %q generated=%v %v; want the same token, loaded", again, generated, err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadToken(file, dir); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a 5-character token file: %v, want an error naming the file", err)
	}
	if err := os.WriteFile(file, []byte("  configured-token-1234 \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, generated, err := LoadToken(file, dir); err != nil || generated || got != "configured-token-1234" {
		t.Errorf("configured token: %q %v %v", got, generated, err)
	}
	if _, _, _, err := LoadToken(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("a configured token file that does not exist must be an error, not a new token")
	}
	if _, _, _, err := LoadToken("", ""); err == nil || !strings.Contains(err.Error(), "--dashboard-token-file") {
		t.Errorf("no file and no state dir: %v, want an error naming the flag", err)
	}
}

type fakeCounters map[model.Family]map[string]BackendTraffic

func (f fakeCounters) Counters(fam model.Family, tables func(string) bool) (map[string]BackendTraffic, error) {
	if !tables(nft.TableName) {
		return nil, nil
	}
	return f[fam], nil
}

func TestNFTTrafficByPlanNames(t *testing.T) {
	snap := mt.Snapshot(
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.DualStack("fd00:96::10")),
		mt.Slice("default", "web-4", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1"), mt.EP("10.0.1.2")),
		mt.Slice("default", "web-6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:1::1")))
	sp := snap.Sorted()[0]
	svc := "service-" + nft.ChainBase(sp.Name)
	ep := func(i int) string { return nft.EndpointChain(sp.Name, sp.Endpoints[i]) }
	c := fakeCounters{
		model.IPv4: {svc: {Packets: 5, Bytes: 300}, ep(0): {Packets: 3, Bytes: 180}, ep(1): {Packets: 2, Bytes: 120}, "unrelated": {Packets: 99}},
		model.IPv6: {svc: {Packets: 1, Bytes: 80}, ep(2): {Packets: 1, Bytes: 80}},
	}
	tr := &NFTTraffic{Counters: c, Families: []model.Family{model.IPv4, model.IPv6}}
	got, err := tr.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	web := got["default/web:http"]
	if web.Packets != 6 || web.Bytes != 380 || len(web.Backends) != 3 ||
		web.Backends["10.0.1.1:8080"].Packets != 3 || web.Backends["10.0.1.2:8080"].Packets != 2 || web.Backends["[fd00:1::1]:8080"].Packets != 1 {
		t.Errorf("traffic %+v, want both families summed per service and split per backend", got)
	}

	// A full sync recreated the IPv4 table: its counters restart; the totals go on.
	c[model.IPv4] = map[string]BackendTraffic{svc: {Packets: 1, Bytes: 60}, ep(0): {Packets: 1, Bytes: 60}, ep(1): {}}
	got, err = tr.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	web = got["default/web:http"]
	if web.Packets != 7 || web.Bytes != 440 || web.Backends["10.0.1.1:8080"].Packets != 4 || web.Backends["10.0.1.2:8080"].Packets != 2 {
		t.Errorf("after a counter restart: %+v, want the counts carried over (7 packets, backend 1 at 4)", web)
	}
}

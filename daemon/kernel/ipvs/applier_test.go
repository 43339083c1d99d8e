package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipvslink"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// Test IP plan (the demo lab's): node "gw" with 10.200.1.1 and fd00:200:1::1 on eth0;
// web: cluster IPs 10.96.0.10 / fd00:96::10 port 80, LoadBalancer IP 203.0.113.10, node
// port 30080, endpoints 10.200.2.11-13:8080 and fd00:200:2::11:8080.

type fixture struct {
	t     *testing.T
	a     *Applier
	ipvs  *Fake
	links *ipvslink.FakeLinks
	aux   FakeAux
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, ipvs: NewFake(), links: ipvslink.NewFakeLinks("10.200.1.1", "fd00:200:1::1", "127.0.0.1"), aux: NewFakeAux()}
	f.a = &Applier{Open: func() (IPVS, error) { return f.ipvs, nil }, Links: f.links, Aux: f.aux}
	return f
}

func web(mods ...func(*v1.Service)) *v1.Service {
	return mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10"),
	}, mods...)...)
}

func webV4(eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080, eps...)
}

func webV6() *discovery.EndpointSlice {
	return mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
}

func ready3() *discovery.EndpointSlice {
	return webV4(mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13"))
}

// plans plans both families the way the IPVS dataplane does.
func (f *fixture) plans(objs ...any) []*ipvsplan.Plan {
	f.t.Helper()
	addrs, err := f.a.NodeAddrs()
	if err != nil {
		f.t.Fatal(err)
	}
	cfg := ipvsplan.Config{Config: plan.Config{NodeName: "gw"}, NodeAddrs: addrs}
	snap := mt.Snapshot(objs...)
	return []*ipvsplan.Plan{ipvsplan.Build(snap, model.IPv4, cfg), ipvsplan.Build(snap, model.IPv6, cfg)}
}

func (f *fixture) apply(full bool, objs ...any) Stats {
	f.t.Helper()
	st, err := f.a.Apply(f.plans(objs...), full)
	if err != nil {
		f.t.Fatalf("apply: %v\n%s", err, f.ipvs.Dump())
	}
	return st
}

func key(s string) ipvsplan.VSKey {
	proto, ap, _ := strings.Cut(s, " ")
	p := netip.MustParseAddrPort(ap)
	return ipvsplan.VSKey{Addr: p.Addr(), Proto: model.Protocol(proto), Port: p.Port()}
}

func TestApplyProgramsThePlan(t *testing.T) {
	f := newFixture(t)
	st := f.apply(false, web(mt.Affinity(300)), ready3(), webV6())
	if !st.Full || st.Services != 5 || st.Addresses != 3 {
		t.Errorf("first apply: %+v, want a full one creating 5 virtual servers and 3 addresses", st)
	}
	if st.Kernel <= 0 {
		t.Errorf("first apply: the kernel's part is %v, want the time of its calls", st.Kernel)
	}
	want := `Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.10:80 rr persistent 300
  -> 10.200.2.11:8080             Masq    1      0          0         
  -> 10.200.2.12:8080             Masq    1      0          0         
  -> 10.200.2.13:8080             Masq    1      0          0         
TCP  10.200.1.1:30080 rr persistent 300
  -> 10.200.2.11:8080             Masq    1      0          0         
  -> 10.200.2.12:8080             Masq    1      0          0         
  -> 10.200.2.13:8080             Masq    1      0          0         
TCP  203.0.113.10:80 rr persistent 300
  -> 10.200.2.11:8080             Masq    1      0          0         
  -> 10.200.2.12:8080             Masq    1      0          0         
  -> 10.200.2.13:8080             Masq    1      0          0         
TCP  [fd00:96::10]:80 rr persistent 300
  -> [fd00:200:2::11]:8080        Masq    1      0          0         
TCP  [fd00:200:1::1]:30080 rr persistent 300
  -> [fd00:200:2::11]:8080        Masq    1      0          0         
`
	if d := cmp.Diff(want, f.ipvs.Dump()); d != "" {
		t.Errorf("IPVS table (-want +got):\n%s", d)
	}
	wantLinks := "edgegate-ipvs0 (dummy) 10.96.0.10 203.0.113.10 fd00:96::10\neth0 (device) 10.200.1.1 fd00:200:1::1 127.0.0.1\n"
	if d := cmp.Diff(wantLinks, f.links.Dump()); d != "" {
		t.Errorf("interfaces (-want +got):\n%s", d)
	}
	if d := f.aux.Dump(); !strings.Contains(d, "table ip edgegate-ipvs") || !strings.Contains(d, "table ip6 edgegate-ipvs") {
		t.Errorf("auxiliary tables not applied:\n%s", d)
	}
}

// The same plan again makes no kernel call at all when incremental, and only reads when full.
func TestUnchangedPlanIsFree(t *testing.T) {
	f := newFixture(t)
	objs := []any{web(), ready3(), webV6()}
	f.apply(false, objs...)
	f.ipvs.Reset()
	f.links.Calls = nil
	if st := f.apply(false, objs...); st.Full || st.Services+st.Deleted+st.Destinations+st.Addresses != 0 {
		t.Errorf("second apply: %+v", st)
	}
	if len(f.ipvs.Calls) != 0 || len(f.links.Calls) != 0 {
		t.Errorf("unchanged incremental apply made calls: ipvs %q, links %q", f.ipvs.Calls, f.links.Calls)
	}
	if st := f.apply(true, objs...); st.Services+st.Deleted+st.Destinations+st.Addresses != 0 {
		t.Errorf("unchanged full apply changed something: %+v", st)
	}
	if m := f.ipvs.Mutations(); len(m) != 0 || len(f.links.Calls) != 0 {
		t.Errorf("unchanged full apply changed the kernel: ipvs %q, links %q", m, f.links.Calls)
	}
}

// A replaced endpoint costs, per virtual server, one read, one add, one removal and the
// read back, and nothing on any other virtual server or family.
func TestChangedEndpointMakesOnlyTheNeededCalls(t *testing.T) {
	f := newFixture(t)
	f.apply(false, web(), ready3(), webV6())
	f.ipvs.Reset()
	st := f.apply(false, web(), webV4(mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.14")), webV6())
	var want []string
	for _, vs := range []string{"TCP 10.96.0.10:80", "TCP 10.200.1.1:30080", "TCP 203.0.113.10:80"} {
		want = append(want, "GetDestinations "+vs, "NewDestination "+vs+" -> 10.200.2.14:8080 1", "DelDestination "+vs+" -> 10.200.2.13:8080 1")
	}
	for _, vs := range []string{"TCP 10.96.0.10:80", "TCP 10.200.1.1:30080", "TCP 203.0.113.10:80"} {
		want = append(want, "GetDestinations "+vs)
	}
	if d := cmp.Diff(want, f.ipvs.Calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if st.Destinations != 6 || st.Services != 0 {
		t.Errorf("stats %+v, want 6 real server changes and no virtual server change", st)
	}
}

func TestServiceChangesAreUpdatesInPlace(t *testing.T) {
	f := newFixture(t)
	f.apply(false, web(), ready3())
	f.ipvs.Reset()
	f.apply(false, web(mt.Affinity(60)), ready3())
	for _, c := range f.ipvs.Mutations() {
		if !strings.HasPrefix(c, "UpdateService") {
			t.Errorf("affinity change made %q; want only UpdateService calls", c)
		}
	}
	if got := len(f.ipvs.Mutations()); got != 5 {
		t.Errorf("%d updates, want 5 (cluster IP, LoadBalancer IP, node port; IPv6 cluster IP and node port)", got)
	}
	if !strings.Contains(f.ipvs.Dump(), "TCP  10.96.0.10:80 rr persistent 60") {
		t.Errorf("affinity not programmed:\n%s", f.ipvs.Dump())
	}
	// A removed service goes, with its address; the other family's stays.
	f.apply(false, mt.Service("default", "other", "10.96.0.11", mt.Port("", v1.ProtocolUDP, 53, 53, 0)))
	if d := f.ipvs.Dump(); strings.Contains(d, "10.96.0.10") || !strings.Contains(d, "UDP  10.96.0.11:53 rr") {
		t.Errorf("after removing web:\n%s", d)
	}
	if d := f.links.Dump(); !strings.HasPrefix(d, "edgegate-ipvs0 (dummy) 10.96.0.11\n") {
		t.Errorf("dummy addresses after removing web:\n%s", d)
	}
}

func TestReadBackMismatchIsAnError(t *testing.T) {
	f := newFixture(t)
	f.ipvs.Mangle = func(s *Service) { s.Scheduler = "wrr" }
	_, err := f.a.Apply(f.plans(web(), ready3()), false)
	if err == nil || !strings.Contains(err.Error(), "read back scheduler wrr persistence 0s, want rr 0s") ||
		!strings.Contains(err.Error(), "TCP  10.96.0.10:80 (default/web:http)") {
		t.Fatalf("mangled scheduler: err %v", err)
	}
	f.ipvs.Mangle = nil
	f.ipvs.Reset()
	st := f.apply(false, web(), ready3())
	if !st.Full || st.Services != 5 {
		t.Errorf("the apply after a failure: %+v, want a full one repairing the 5 virtual servers", st)
	}
}

// moby/ipvs without the module: every change "succeeds" and nothing happens.
func TestSilentFailureIsAnError(t *testing.T) {
	f := newFixture(t)
	f.ipvs.Silent = true
	_, err := f.a.Apply(f.plans(web(), ready3()), false)
	if err == nil || !strings.Contains(err.Error(), "not in the kernel after it was programmed") {
		t.Fatalf("silent IPVS: err %v", err)
	}
}

// TestRealServerReadBackSamples: an apply that changes the real servers of 600 virtual
// servers reads back a spread of readBackDests of them, and that still finds real servers
// the kernel did not take.
func TestRealServerReadBackSamples(t *testing.T) {
	f := newFixture(t)
	var objs []any
	for i := range 300 { // a ClusterIP and a node port virtual server each
		name := fmt.Sprintf("svc%03d", i)
		objs = append(objs, mt.Service("default", name, fmt.Sprintf("10.96.%d.%d", 1+i/250, 1+i%250),
			mt.Port("http", v1.ProtocolTCP, 80, 8080, int32(30000+i)), mt.Type(v1.ServiceTypeNodePort)),
			mt.Slice("default", name+"-1", name, "http", v1.ProtocolTCP, 8080, mt.EP(fmt.Sprintf("10.200.3.%d", i%250+1))))
	}
	f.ipvs.SilentDests = true
	_, err := f.a.Apply(f.plans(objs...), false)
	if err == nil || !strings.Contains(err.Error(), "not in the kernel after it was programmed") {
		t.Fatalf("real servers not taken: err %v", err)
	}
	reads := 0
	for _, c := range f.ipvs.Calls {
		if strings.HasPrefix(c, "GetDestinations") {
			reads++
		}
	}
	if reads > readBackDests {
		t.Errorf("read back the real servers of %d virtual servers, want at most %d", reads, readBackDests)
	}
}

func TestRealServerReadBack(t *testing.T) {
	f := newFixture(t)
	f.apply(false, web(), webV4(mt.EP("10.200.2.11")))
	// The kernel refuses one real server: the error names it, the rest is applied.
	f.ipvs.Fail = func(c string) error {
		if strings.HasPrefix(c, "NewDestination TCP 203.0.113.10:80 -> 10.200.2.12") {
			return errors.New("netlink: invalid argument")
		}
		return nil
	}
	_, err := f.a.Apply(f.plans(web(), webV4(mt.EP("10.200.2.11"), mt.EP("10.200.2.12"))), false)
	if err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Fatalf("refused real server: err %v", err)
	}
	if d := f.ipvs.Dump(); strings.Count(d, "10.200.2.12:8080") != 2 {
		t.Errorf("the other virtual servers did not get the new real server:\n%s", d)
	}
}

func TestTerminatingRealServersDrain(t *testing.T) {
	f := newFixture(t)
	cip := key("TCP 10.96.0.10:80")
	ep12 := netip.MustParseAddrPort("10.200.2.12:8080")
	f.apply(false, web(), ready3())
	f.ipvs.SetConns(cip, ep12, 2, 1)
	// .12 terminates: weight 0 while it has connections, wherever it has them.
	terminating := webV4(mt.EP("10.200.2.11"), mt.EP("10.200.2.12", mt.Terminating(true)), mt.EP("10.200.2.13"))
	f.ipvs.Reset()
	st := f.apply(false, web(), terminating)
	if !slices.Contains(f.ipvs.Calls, "UpdateDestination TCP 10.96.0.10:80 -> 10.200.2.12:8080 0") {
		t.Errorf("draining real server not set to weight 0: %q", f.ipvs.Calls)
	}
	if !slices.Contains(f.ipvs.Calls, "DelDestination TCP 203.0.113.10:80 -> 10.200.2.12:8080 1") {
		t.Errorf("real server without connections not removed at once: %q", f.ipvs.Calls)
	}
	if !f.a.Pending() || st.Draining != 1 {
		t.Fatalf("Pending %v, draining %d: want one real server draining", f.a.Pending(), st.Draining)
	}
	// Unchanged plan: the draining virtual server is read, nothing changes.
	f.ipvs.Reset()
	f.apply(false, web(), terminating)
	if got := f.ipvs.Calls; !cmp.Equal(got, []string{"GetDestinations TCP 10.96.0.10:80"}) {
		t.Errorf("while connections remain: calls %q", got)
	}
	// Connections gone: removed; nothing pending any more.
	f.ipvs.SetConns(cip, ep12, 0, 0)
	f.ipvs.Reset()
	f.apply(false, web(), terminating)
	if m := f.ipvs.Mutations(); !cmp.Equal(m, []string{"DelDestination TCP 10.96.0.10:80 -> 10.200.2.12:8080 0"}) {
		t.Errorf("drained: mutations %q", m)
	}
	if f.a.Pending() {
		t.Error("still pending after the last draining real server went")
	}
	// A drained real server in the plan (weight 0) is never added back.
	f.ipvs.Reset()
	f.apply(true, web(), terminating)
	if m := f.ipvs.Mutations(); len(m) != 0 {
		t.Errorf("full apply re-added a terminating real server: %q", m)
	}
}

// An endpoint that disappears without terminating (a deleted pod, a new slice) drains the
// same way; UDP has no graceful termination.
func TestVanishedRealServersDrainTCPOnly(t *testing.T) {
	f := newFixture(t)
	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	dnsEPs := func(eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return mt.Slice("default", "dns-1", "dns", "dns", v1.ProtocolUDP, 5353, eps...)
	}
	f.apply(false, web(), ready3(), dns, dnsEPs(mt.EP("10.200.2.11"), mt.EP("10.200.2.12")))
	f.ipvs.SetConns(key("TCP 10.96.0.10:80"), netip.MustParseAddrPort("10.200.2.13:8080"), 1, 0)
	f.ipvs.SetConns(key("UDP 10.96.0.53:53"), netip.MustParseAddrPort("10.200.2.12:5353"), 0, 4)
	f.ipvs.Reset()
	f.apply(false, web(), webV4(mt.EP("10.200.2.11"), mt.EP("10.200.2.12")), dns, dnsEPs(mt.EP("10.200.2.11")))
	m := f.ipvs.Mutations()
	for _, want := range []string{"UpdateDestination TCP 10.96.0.10:80 -> 10.200.2.13:8080 0", "DelDestination UDP 10.96.0.53:53 -> 10.200.2.12:5353 1"} {
		if !slices.Contains(m, want) {
			t.Errorf("missing %q in %q", want, m)
		}
	}
	if d := f.ipvs.Dump(); !strings.Contains(d, "10.200.2.13:8080             Masq    0      1") {
		t.Errorf("draining real server not kept at weight 0:\n%s", d)
	}
}

func TestForeignVirtualServersAreUntouched(t *testing.T) {
	f := newFixture(t)
	for _, k := range []string{"TCP 192.168.50.1:80", "TCP 10.200.1.1:22", "UDP 10.200.1.1:53"} {
		if err := f.ipvs.NewService(Service{VSKey: key(k), Scheduler: "wlc"}); err != nil {
			t.Fatal(err)
		}
		if err := f.ipvs.NewDestination(Service{VSKey: key(k)}, Destination{Addr: netip.MustParseAddr("192.168.50.9"), Port: 80, Weight: 3}); err != nil {
			t.Fatal(err)
		}
	}
	// Left by an earlier run: a node port on a node address, a VIP on the dummy interface.
	f.links.AddLink("edgegate-ipvs0", "dummy", netip.MustParseAddr("10.96.0.99"))
	for _, k := range []string{"TCP 10.200.1.1:31000", "TCP 10.96.0.99:80"} {
		if err := f.ipvs.NewService(Service{VSKey: key(k), Scheduler: "rr"}); err != nil {
			t.Fatal(err)
		}
	}
	foreign := func() string {
		var keep []string
		for _, l := range strings.Split(f.ipvs.Dump(), "\n") {
			if strings.Contains(l, "192.168.50") || strings.Contains(l, ":22 ") || strings.Contains(l, ":53 ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	before := foreign()
	f.ipvs.Reset()
	f.apply(false, web(), ready3())
	for _, c := range f.ipvs.Mutations() {
		if strings.Contains(c, "192.168.50") || strings.Contains(c, ":22") || strings.Contains(c, ":53") {
			t.Errorf("touched a foreign virtual server: %q", c)
		}
	}
	if d := f.ipvs.Dump(); strings.Contains(d, "31000") || strings.Contains(d, "10.96.0.99") {
		t.Errorf("leftovers of an earlier run not removed:\n%s", d)
	}
	if strings.Contains(f.links.Dump(), "10.96.0.99") {
		t.Errorf("leftover dummy address not removed:\n%s", f.links.Dump())
	}
	if err := f.a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if after := foreign(); after != before || strings.Contains(f.ipvs.Dump(), "10.96.0.10") {
		t.Errorf("cleanup: foreign virtual servers changed or ours stayed:\n%s", f.ipvs.Dump())
	}
}

func TestCleanup(t *testing.T) {
	f := newFixture(t)
	f.apply(false, web(), ready3(), webV6())
	if err := f.a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if d := f.ipvs.Dump(); strings.Count(d, "\n") != 2 {
		t.Errorf("virtual servers left after cleanup:\n%s", d)
	}
	if d := f.links.Dump(); strings.Contains(d, "edgegate-ipvs0") {
		t.Errorf("dummy interface left after cleanup:\n%s", d)
	}
	if d := f.aux.Dump(); d != "" {
		t.Errorf("auxiliary tables left after cleanup:\n%s", d)
	}
	// Applying again after a cleanup starts afresh.
	if st := f.apply(false, web(), ready3()); !st.Full || st.Services != 5 {
		t.Errorf("apply after cleanup: %+v", st)
	}
}

// Without IPVS nothing is touched and the error says so; cleanup still succeeds.
func TestIPVSNotAvailable(t *testing.T) {
	f := newFixture(t)
	f.a.Open = func() (IPVS, error) {
		return nil, fmt.Errorf("%w: /proc/net/ip_vs: no such file or directory", ErrNotAvailable)
	}
	_, err := f.a.Apply(f.plans(web(), ready3()), true)
	if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "ip_vs kernel module not available: /proc/net/ip_vs") {
		t.Fatalf("apply without ip_vs: %v", err)
	}
	if strings.Contains(f.links.Dump(), "edgegate-ipvs0") || f.aux.Dump() != "" {
		t.Errorf("apply without ip_vs changed the node:\n%s%s", f.links.Dump(), f.aux.Dump())
	}
	f.links.AddLink("edgegate-ipvs0", "dummy")
	if err := f.a.Cleanup(); err != nil {
		t.Fatalf("cleanup without ip_vs: %v", err)
	}
	if strings.Contains(f.links.Dump(), "edgegate-ipvs0") {
		t.Error("cleanup without ip_vs left the dummy interface")
	}
}

func TestModulesAndSchedulers(t *testing.T) {
	f := newFixture(t)
	var asked []string
	fail := map[string]error{}
	f.a.Modules = func(names ...string) error {
		asked = append(asked, names...)
		return fail[names[0]]
	}
	fail["ip_vs"] = errors.New("kernel module ip_vs: not built in and not in /lib/modules/6.1.0/modules.dep")
	_, err := f.a.Apply(f.plans(web(), ready3()), true)
	if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "modules.dep") {
		t.Fatalf("ip_vs not loadable: %v", err)
	}
	delete(fail, "ip_vs")
	fail["ip_vs_mh"] = errors.New("kernel module ip_vs_mh: not built in and not in modules.dep")
	hashed := mt.Service("default", "hashed", "10.96.0.20", mt.Port("", v1.ProtocolTCP, 80, 80, 0))
	hashed.Annotations = map[string]string{ipvsplan.SchedulerAnnotation: "mh"}
	f.ipvs.Fail = func(c string) error {
		if strings.HasPrefix(c, "NewService TCP 10.96.0.20:80 mh") {
			return fmt.Errorf("create virtual server: %w", unix.ENOENT)
		}
		return nil
	}
	_, err = f.a.Apply(f.plans(web(), ready3(), hashed), true)
	if err == nil || !strings.Contains(err.Error(), "IPVS scheduler mh: kernel module ip_vs_mh") ||
		!strings.Contains(err.Error(), "is kernel module ip_vs_mh loaded?") {
		t.Fatalf("missing scheduler: %v", err)
	}
	if !strings.Contains(f.ipvs.Dump(), "TCP  10.96.0.10:80 rr") {
		t.Errorf("a missing scheduler kept the other virtual servers out:\n%s", f.ipvs.Dump())
	}
	if want := []string{"ip_vs", "ip_vs", "ip_vs_mh", "ip_vs_rr"}; !cmp.Equal(want, asked) {
		t.Errorf("modules asked for %q, want %q", asked, want)
	}
}

func TestSysctlsAreSet(t *testing.T) {
	f := newFixture(t)
	root := t.TempDir()
	for name, v := range map[string]string{"net/ipv4/vs/conntrack": "0", "net/ipv4/vs/conn_reuse_mode": "1",
		"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
		"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0", "net/ipv4/ip_forward": "1"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.a.Sysctls, f.a.Release = ipvslink.ProcSys{Root: root}, "6.1.0-28-cloud-amd64"
	st := f.apply(false, web(), ready3())
	want := []string{"net/ipv4/vs/conntrack=1", "net/ipv4/vs/expire_nodest_conn=1", "net/ipv4/vs/expire_quiescent_template=1",
		"net/ipv4/conf/all/arp_ignore=1", "net/ipv4/conf/all/arp_announce=2"}
	if !cmp.Equal(want, st.Sysctls) {
		t.Errorf("changed sysctls %q, want %q", st.Sysctls, want)
	}
	if st := f.apply(false, web(), ready3()); st.Sysctls != nil {
		t.Errorf("second apply changed sysctls again: %q", st.Sysctls)
	}
}

func TestDummyNameTakenByAnotherInterface(t *testing.T) {
	f := newFixture(t)
	f.links.AddLink("edgegate-ipvs0", "bridge")
	_, err := f.a.Apply(f.plans(web(), ready3()), true)
	if err == nil || !strings.Contains(err.Error(), "edgegate-ipvs0 exists and is a bridge, not a dummy") {
		t.Fatalf("err %v", err)
	}
	if d := f.ipvs.Dump(); strings.Count(d, "\n") != 2 {
		t.Errorf("virtual servers made without their dummy interface:\n%s", d)
	}
}

// A virtual server made by hand between two syncs, that the plan now wants: taken over.
func TestExistingVirtualServerIsTakenOver(t *testing.T) {
	f := newFixture(t)
	f.apply(false, web(), ready3())
	if err := f.ipvs.NewService(Service{VSKey: key("TCP 10.96.0.20:80"), Scheduler: "wlc"}); err != nil {
		t.Fatal(err)
	}
	other := mt.Service("default", "other", "10.96.0.20", mt.Port("", v1.ProtocolTCP, 80, 80, 0))
	otherEPs := mt.Slice("default", "other-1", "other", "", v1.ProtocolTCP, 80, mt.EP("10.200.2.21"))
	f.apply(false, web(), ready3(), other, otherEPs)
	if d := f.ipvs.Dump(); !strings.Contains(d, "TCP  10.96.0.20:80 rr\n  -> 10.200.2.21:80") {
		t.Errorf("existing virtual server not taken over:\n%s", d)
	}
}

// A node port outside the node-port range is edgegate's while it programmed it.
func TestOwnNodePortOutsideTheRange(t *testing.T) {
	f := newFixture(t)
	svc := mt.Service("default", "np", "10.96.0.30", mt.Port("", v1.ProtocolTCP, 80, 80, 8080), mt.Type(v1.ServiceTypeNodePort))
	f.apply(false, svc)
	if !strings.Contains(f.ipvs.Dump(), "TCP  10.200.1.1:8080 rr") {
		t.Fatalf("node port 8080 not programmed:\n%s", f.ipvs.Dump())
	}
	f.apply(true)
	if d := f.ipvs.Dump(); strings.Contains(d, "8080") {
		t.Errorf("own node port outside the range left behind:\n%s", d)
	}
}

package proxy

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/kernel/kernelview"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

func inNetnsCmd(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The ipvs dataplane on the running kernel, in a throwaway namespace. Where the kernel
// has no IPVS (the development machines) a sync fails with the clear error and changes
// nothing; where it has (the firmware's kernel) the virtual servers and VIPs appear.
// Either way Cleanup, which every start in another mode runs, succeeds and leaves nothing.
func TestIPVSDataplaneOnThisKernel(t *testing.T) {
	kerneltest.InNetns(t, "egpxv", func(ns string) {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		// moby/ipvs cannot add real servers while lo is down (FIELD-NOTES).
		if lo, err := h.LinkByName("lo"); err != nil || h.LinkSetUp(lo) != nil {
			t.Fatalf("lo up: %v", err)
		}
		dp := &IPVS{Backend: ipvs.NewApplier(), Families: []model.Family{model.IPv4, model.IPv6},
			Config: ipvsplan.Config{Config: plan.Config{NodeName: "gw"}, Scheduler: "rr"}}
		snap := mt.Snapshot(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
		_, err = dp.Program(snap, true)
		if ipvs.Available() != nil {
			if !errors.Is(err, ipvs.ErrNotAvailable) || !strings.Contains(err.Error(), "ip_vs kernel module not available: kernel module ip_vs") {
				t.Fatalf("sync without IPVS: %v", err)
			}
			t.Logf("this kernel has no IPVS; the sync says: %v", err)
			if out := inNetnsCmd(t, ns, "nft", "list", "ruleset"); strings.Contains(out, "edgegate-ipvs") {
				t.Errorf("sync without IPVS made tables:\n%s", out)
			}
			if out := inNetnsCmd(t, ns, "ip", "link"); strings.Contains(out, ipvsplan.Interface) {
				t.Errorf("sync without IPVS made the dummy interface:\n%s", out)
			}
			// What a previous run in ipvs mode would have left, for Cleanup to remove.
			snapAux := ipvsplan.Build(snap, model.IPv4, ipvsplan.Config{Config: plan.Config{NodeName: "gw"}})
			if _, err := ipvs.NewKernelAux().Apply([]*nftplan.Table{snapAux.Aux}, true); err != nil {
				t.Fatal(err)
			}
		} else {
			if err != nil {
				t.Fatalf("sync with IPVS: %v", err)
			}
			k, err := ipvs.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			entries, err := ipvs.List(k)
			if err != nil || !strings.Contains(ipvs.Format(entries, false), "TCP  10.96.0.10:80 rr\n  -> 10.200.2.11:8080") {
				t.Errorf("IPVS table: %v\n%s", err, ipvs.Format(entries, false))
			}
			if out := inNetnsCmd(t, ns, "ip", "route", "show", "table", "local", "dev", ipvsplan.Interface); !strings.Contains(out, "local 10.96.0.10 proto 69 scope host") {
				t.Errorf("local routes through the dummy interface:\n%s", out)
			}
		}
		// The operator's view: the IPVS table, then the nftables ruleset with the auxiliary
		// table; without IPVS, the error that says so.
		rules, err := kernelview.NewIPVSView().Rules()
		if ipvs.Available() != nil {
			if err == nil || !strings.Contains(err.Error(), "ip_vs") {
				t.Errorf("the ipvs view without IPVS: %v, want the error naming ip_vs", err)
			}
		} else if err != nil || !strings.Contains(rules, "TCP  10.96.0.10:80 rr") || !strings.Contains(rules, "table ip edgegate-ipvs {") {
			t.Errorf("the ipvs view: %v, want the IPVS table and the auxiliary table\n%s", err, rules)
		}
		if err := dp.Cleanup(); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if out := inNetnsCmd(t, ns, "nft", "list", "ruleset"); strings.Contains(out, "edgegate-ipvs") {
			t.Errorf("tables left after cleanup:\n%s", out)
		}
		if out := inNetnsCmd(t, ns, "ip", "link"); strings.Contains(out, ipvsplan.Interface) {
			t.Errorf("dummy interface left after cleanup:\n%s", out)
		}
	})
}

package ipt

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// TestSameRulesKnowsEveryType: every match and target the plans use is comparable or
// CtState (sameMatch would panic on another uncomparable one), and sameRules answers as
// reflect.DeepEqual does for every pair of same-named chains of two different plans.
func TestSameRulesKnowsEveryType(t *testing.T) {
	svc := func(ip string, mods ...func(*v1.Service)) *v1.Service {
		return mt.Service("default", "web", ip, append([]func(*v1.Service){mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080)}, mods...)...)
	}
	eps := func(local, remote string) any {
		return mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP(local, mt.OnNode("gw")), mt.EP(remote))
	}
	cfg := plan.Config{NodeName: "gw", MasqueradeAll: true}
	a := iptplan.Build(mt.Snapshot(svc("10.96.0.10", mt.Affinity(300), mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges("10.0.0.0/8")),
		eps("10.200.2.11", "10.200.2.12")), model.IPv4, cfg)
	b := iptplan.Build(mt.Snapshot(svc("10.96.0.10", mt.ExternalLocal(32000), mt.LoadBalancerIPs("203.0.113.10")),
		eps("10.200.2.11", "10.200.2.13")), model.IPv4, cfg)
	types := map[reflect.Type]bool{}
	compared, differ := 0, 0
	for _, name := range []string{"nat", "filter"} {
		chains := map[string]*iptplan.Chain{}
		for _, c := range a.Table(name).Chains {
			chains[c.Name] = c
		}
		for _, c := range b.Table(name).Chains {
			for _, r := range c.Rules {
				for _, m := range r.Matches {
					types[reflect.TypeOf(m)] = true
				}
				types[reflect.TypeOf(r.Target)] = true
			}
			if o := chains[c.Name]; o != nil {
				compared++
				want := reflect.DeepEqual(o.Rules, c.Rules)
				if !want {
					differ++
				}
				if got := sameRules(o.Rules, c.Rules); got != want {
					t.Errorf("chain %s: sameRules %v, DeepEqual %v", c.Name, got, want)
				}
			}
		}
	}
	for typ := range types {
		if typ != reflect.TypeOf(iptplan.CtState{}) && !typ.Comparable() {
			t.Errorf("%v is not comparable: sameMatch must compare it itself", typ)
		}
	}
	if compared < 5 || differ == 0 || differ == compared {
		t.Errorf("compared %d chains, %d differing: the plans should share some and differ in some", compared, differ)
	}
	if len(types) < 6 {
		t.Errorf("the plans used only %d match and target types", len(types))
	}
}

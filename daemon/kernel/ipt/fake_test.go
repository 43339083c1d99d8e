package ipt

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
	v1 "k8s.io/api/core/v1"
)

func TestFake(t *testing.T) {
	snap := mt.Snapshot(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.DualStack("fd00:96::10")),
		mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.0.11")))
	cfg := plan.Config{NodeName: "gw"}
	plans := []*iptplan.Tables{iptplan.Build(snap, model.IPv4, cfg), iptplan.Build(snap, model.IPv6, cfg)}
	f := NewFake()
	st, err := f.Apply(plans, false)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Full || st.Chains == 0 || st.Rules == 0 {
		t.Errorf("first apply: %+v, want a full apply that wrote chains and rules", st)
	}
	if got, want := f.Dump(), plans[0].Dump()+plans[1].Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}

	f.FailNext = errors.New("refused")
	if _, err := f.Apply(plans[:1], false); err == nil {
		t.Fatal("FailNext did not fail the apply")
	}
	if !strings.Contains(f.Dump(), "fd00:96::10") {
		t.Error("a failed apply changed the fake's rules")
	}
	st, err = f.Apply(plans[:1], false)
	if err != nil || !st.Full {
		t.Errorf("apply after a failure: %+v, %v; want a full apply", st, err)
	}
	if strings.Contains(f.Dump(), "fd00:96::10") {
		t.Error("the dropped IPv6 plan is still in the dump")
	}

	bad := iptplan.Build(snap, model.IPv4, cfg)
	bad.Tables[0].Builtin["INPUT"] = []iptplan.Rule{{Matches: []iptplan.Match{iptplan.Comment{Text: strings.Repeat("x", 256)}}}}
	if _, err := f.Apply([]*iptplan.Tables{bad}, false); err == nil {
		t.Error("a comment longer than xt_comment holds was accepted")
	}
	if err := f.Cleanup(); err != nil || f.Dump() != "" {
		t.Errorf("cleanup: %v, dump %q", err, f.Dump())
	}
}

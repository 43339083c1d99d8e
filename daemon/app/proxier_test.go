package app

import (
	"net/netip"
	"slices"
	"testing"
)

// TestPlanConfig: "primary" node-port addresses are the node IPs; CIDRs are masked.
func TestPlanConfig(t *testing.T) {
	cfg := defaults()
	cfg.HostnameOverride = "gw-1"
	cfg.NodeIPs = []string{"192.0.2.1", "2001:db8::1"}
	cfg.NodePortAddresses = []string{"primary", "10.0.0.5/8"}
	cfg.ClusterCIDRs = []string{"10.244.1.0/16"}
	pc, err := planConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::1/128"), netip.MustParsePrefix("10.0.0.0/8")}
	if pc.NodeName != "gw-1" || !slices.Equal(pc.NodePortAddresses, want) || !slices.Equal(pc.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) {
		t.Errorf("plan config %+v", pc)
	}
}

package ipvstest

import (
	"testing"
	"time"

	"github.com/edgegate/edgegate/lab/labtest"
)

// TestLoadBalancerSmoke runs two gateways announcing a LoadBalancer IP on a site inside the
// guest, on the firmware's own kernel, in ipvs mode (the IP on the dummy interface, the
// kernel kept from answering ARP for it by arp_ignore, the announcer answering instead):
// the client reaches the IP through its owner, and a kill of the owner's daemon moves new
// connections and the client's neighbour entry to the other gateway.
func TestLoadBalancerSmoke(t *testing.T) {
	s := labtest.NewLBSite(t, "ipvs")
	owner := s.Owner(t)
	s.Daemons[owner].Kill(t)
	killed := time.Now()
	moved := s.ThroughGateway(t, 1-owner, 10*time.Second)
	t.Logf("ipvs mode in the guest: gateway-%d killed, %s through gateway-%d after %v",
		owner+1, labtest.SiteLBAddr, 2-owner, moved.Sub(killed).Round(time.Millisecond))
}

package lab

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// TapNames are the taps of a lab built with Options.Taps, in the order of the guest's NICs:
// eth0 on client-1's segment (the node IP), eth1 on the backends' bridge, eth2 on client-2's
// segment, eth3 on the uplink to upstream.
var TapNames = []string{"tap-c1", "tap-back", "tap-c2", "tap-up"}

// TapGuestIPs are the addresses a gateway on the taps takes, as PID 1's ip entries
// (<dev>:<addr>/<prefix>[:<router>], network.yaml's and edgegate.ip's form): the lab gateway's
// own, and its default routes towards upstream.
var TapGuestIPs = []string{
	"eth0:10.200.1.1/24", "eth0:fd00:200:1::1/64",
	"eth1:10.200.2.1/24", "eth1:fd00:200:2::1/64",
	"eth2:10.200.3.1/24", "eth2:fd00:200:3::1/64",
	"eth3:10.200.9.1/24:10.200.9.2", "eth3:fd00:200:9::1/64:fd00:200:9::2",
}

// wireSwitch wires the lab of Options.Taps: the gateway namespace holds one bridge per
// segment, each joining the segment's veths to its tap, and nothing else; the leaves are
// wired as in wire.
func (l *Lab) wireSwitch() error {
	// A tap is made through /dev/net/tun, in the namespace of the thread that opens it.
	for _, name := range TapNames {
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI}
		if err := l.Gateway.Do(func() error { return netlink.LinkAdd(tap) }); err != nil {
			return fmt.Errorf("%s: tap %s: %w", l.Gateway.Name, name, err)
		}
	}
	sw, err := openLinks(l.Gateway)
	if err != nil {
		return err
	}
	defer sw.close()
	sw.up("lo")
	sw.veth("c1", l.Client)
	sw.veth("c2", l.Client2)
	sw.veth("uplink", l.Upstream)
	l.backendPorts(sw)
	for _, seg := range []struct{ bridge, tap, port string }{
		{"br-c1", TapNames[0], "c1"}, {"br0", TapNames[1], ""}, {"br-c2", TapNames[2], "c2"}, {"br-up", TapNames[3], "uplink"},
	} {
		if seg.bridge != "br0" {
			sw.bridge(seg.bridge)
		}
		for _, port := range []string{seg.tap, seg.port} {
			if port != "" {
				sw.master(port, seg.bridge)
				sw.up(port)
			}
		}
		sw.up(seg.bridge)
	}
	if sw.err != nil {
		return sw.err
	}
	return l.wireLeaves()
}

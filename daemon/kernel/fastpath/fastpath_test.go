package fastpath

import (
	"slices"
	"testing"
)

func TestDevices(t *testing.T) {
	got := Devices([]Link{
		{Name: "lo", Type: "device", Up: true, Loopback: true},
		{Name: "eth1", Type: "device", Up: true},
		{Name: "eth0", Type: "device", Up: true},
		{Name: "eth2", Type: "device"}, // down
		{Name: "c1", Type: "veth", Up: true},
		{Name: "edgegate-ipvs0", Type: "dummy", Up: true},
		{Name: "wg0", Type: "wireguard", Up: true},
		{Name: "bond0.100", Type: "vlan", Up: true},
	})
	if want := []string{"bond0.100", "c1", "eth0", "eth1"}; !slices.Equal(got, want) {
		t.Errorf("Devices = %v, want %v", got, want)
	}
}

package pid1

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// LinkConfigurator configures network devices.
type LinkConfigurator interface {
	// NICs lists the physical network devices (not loopback, not virtual).
	NICs() ([]string, error)
	// WaitLink returns once the device exists: drivers may register it after their module
	// has loaded.
	WaitLink(ctx context.Context, dev string) error
	SetUp(dev string) error
	// ReplaceAddress adds or refreshes an address; a zero lifetime is forever.
	ReplaceAddress(dev string, addr netip.Prefix, lifetime time.Duration) error
	// ReplaceDefaultRoute points the default route of gw's family at gw through dev.
	ReplaceDefaultRoute(dev string, gw netip.Addr) error
	// Rename renames a device that is down.
	Rename(dev, name string) error
	// AddAltName gives a device an alternative name, which netlink and ip(8) accept
	// wherever a device's name goes.
	AddAltName(dev, name string) error
}

// networkFile is the static network configuration, kept apart from config.yaml because
// the daemon reads that strictly:
//
//	ip:
//	- eth0:10.0.2.15/24:10.0.2.2
//	- eth1:dhcp
//
// Entries are written like edgegate.ip=; a device named on the kernel command line takes
// its configuration from there only. The data partition's file (the gateway's own, mounted
// before the network comes up) replaces the image's; one that cannot be read or parsed is
// logged and the image's is used, so a typo there does not cut the box off.
const (
	networkFile     = "/etc/edgegate/network.yaml"
	dataNetworkFile = dataMountpoint + "/network.yaml"
)

type networkConfig struct {
	IP []string `json:"ip"`
}

// Timeouts of the network step.
const (
	linkWait         = 10 * time.Second // for a configured device to appear
	firstLeaseWithin = 20 * time.Second // for the first DHCP lease, before boot goes on
)

// networkPlan merges the network file with the kernel command line.
func (m *Machine) networkPlan() []IPConfig {
	var plan []IPConfig
	onCmdline := map[string]bool{}
	for _, c := range m.cmdline.IP {
		onCmdline[c.Dev] = true
	}
	for _, file := range []string{dataNetworkFile, networkFile} {
		entries, ok := m.readNetworkFile(file)
		if !ok {
			continue
		}
		for _, c := range entries {
			if !onCmdline[c.Dev] {
				plan = append(plan, c)
			}
		}
		break
	}
	return append(plan, m.cmdline.IP...)
}

// readNetworkFile reads one network file; ok is false when it is absent or unusable as a
// whole. Entries that do not parse are logged and skipped.
func (m *Machine) readNetworkFile(file string) (entries []IPConfig, ok bool) {
	b, err := os.ReadFile(m.path(file))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false
	case err != nil:
		m.log.Error("reading the network configuration failed", "file", file, "err", err)
		return nil, false
	}
	var nc networkConfig
	if err := yaml.UnmarshalStrict(b, &nc); err != nil {
		m.log.Error("network configuration ignored", "file", file, "err", err)
		return nil, false
	}
	for _, s := range nc.IP {
		c, err := ParseIPConfig(s)
		if err != nil {
			m.log.Error("network entry ignored", "file", file, "entry", s, "err", err)
			continue
		}
		entries = append(entries, c)
	}
	m.log.Info("network configuration", "file", file, "entries", len(entries))
	return entries, true
}

// forwardingSysctls turn the machine into a router: a gateway forwards the traffic its
// rules translate to endpoints behind it. The kernel's default is off for both families.
var forwardingSysctls = []string{
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sys/net/ipv6/conf/all/forwarding",
}

// enableForwarding switches IPv4 and IPv6 forwarding on; a family that fails (a kernel
// without IPv6) is logged by name and the other still forwards.
func (m *Machine) enableForwarding() {
	for _, s := range forwardingSysctls {
		if err := os.WriteFile(m.path(s), []byte("1\n"), 0); err != nil {
			m.log.Error("enabling forwarding failed", "sysctl", s, "err", err)
		}
	}
}

// configureNetwork brings up lo and every NIC, gives the configured devices their static
// addresses and default routes, and takes a first DHCP lease where asked. Every failure is
// logged by device and the rest goes on; DHCP devices without a lease keep trying under
// the supervisor.
func (m *Machine) configureNetwork(ctx context.Context) {
	start := time.Now()
	m.enableForwarding()
	links := m.sys.Links
	if err := links.SetUp("lo"); err != nil {
		m.log.Error("bringing up lo failed", "err", err)
	}
	nics, err := links.NICs()
	if err != nil {
		m.log.Error("listing network devices failed", "err", err)
	}
	for _, dev := range nics {
		if err := links.SetUp(dev); err != nil {
			m.log.Error("bringing up a NIC failed", "dev", dev, "err", err)
		}
	}
	plan := m.networkPlan()
	m.netMu.Lock()
	m.netPlan = plan
	m.netMu.Unlock()
	var dhcpDevs []string
	for _, c := range plan {
		if !slices.Contains(nics, c.Dev) {
			wctx, cancel := context.WithTimeout(ctx, linkWait)
			err := links.WaitLink(wctx, c.Dev)
			cancel()
			if err != nil {
				m.log.Error("network device not found; its configuration is skipped", "dev", c.Dev, "config", c.String(), "err", err)
				continue
			}
			if err := links.SetUp(c.Dev); err != nil {
				m.log.Error("bringing up a NIC failed", "dev", c.Dev, "err", err)
				continue
			}
			nics = append(nics, c.Dev)
		}
		if c.DHCP {
			if !slices.Contains(dhcpDevs, c.Dev) {
				dhcpDevs = append(dhcpDevs, c.Dev)
			}
			continue
		}
		m.configureStatic(c)
	}
	m.startDHCP(ctx, dhcpDevs)
	m.log.Info("network configured", "nics", nics, "took", since(start))
}

func (m *Machine) configureStatic(c IPConfig) {
	if err := m.sys.Links.ReplaceAddress(c.Dev, c.Addr, 0); err != nil {
		m.log.Error("adding an address failed", "dev", c.Dev, "addr", c.Addr, "err", err)
		return
	}
	m.console.marker("EDGEGATE-NET-UP %s %s", c.Dev, c.Addr)
	m.netConfigured(c)
	if c.Gateway.IsValid() {
		if err := m.sys.Links.ReplaceDefaultRoute(c.Dev, c.Gateway); err != nil {
			m.log.Error("adding the default route failed", "dev", c.Dev, "gateway", c.Gateway, "err", err)
		}
	}
}

// startDHCP takes the first lease of each device in parallel, bounded in time, and leaves
// a lease keeper per device for Run to supervise.
func (m *Machine) startDHCP(ctx context.Context, devs []string) {
	var wg sync.WaitGroup
	for _, dev := range devs {
		k := &leaseKeeper{m: m, dev: dev}
		m.leases = append(m.leases, k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, firstLeaseWithin)
			defer cancel()
			if err := k.acquire(actx); err != nil {
				m.log.Error("no DHCP lease yet; still trying in the background", "dev", dev, "err", err)
			}
		}()
	}
	wg.Wait()
}

// applyLease configures what a lease gives: the address for the lease's time, the default
// route, and the name servers.
func (m *Machine) applyLease(dev string, l Lease, announce bool) error {
	if err := m.sys.Links.ReplaceAddress(dev, l.Address, l.Duration); err != nil {
		return fmt.Errorf("address %s: %w", l.Address, err)
	}
	if announce {
		m.console.marker("EDGEGATE-NET-UP %s %s", dev, l.Address)
	}
	m.netConfigured(IPConfig{Dev: dev, DHCP: true})
	if l.Router.IsValid() {
		if err := m.sys.Links.ReplaceDefaultRoute(dev, l.Router); err != nil {
			return fmt.Errorf("default route via %s: %w", l.Router, err)
		}
	}
	if len(l.DNS) > 0 {
		if err := writeResolvConf(m.path("/etc/resolv.conf"), l.DNS); err != nil {
			m.log.Warn("writing /etc/resolv.conf failed", "err", err)
		}
	}
	return nil
}

func writeResolvConf(file string, servers []netip.Addr) error {
	var b []byte
	b = append(b, "# written by edgegate from a DHCP lease\n"...)
	for _, s := range servers {
		b = fmt.Appendf(b, "nameserver %s\n", s)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

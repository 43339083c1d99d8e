// Package ipvslink is the host side of IPVS mode: the dummy interface the virtual server
// addresses are local through, and the node's own addresses (vishvananda/netlink), the
// sysctls IPVS needs, and loading the ip_vs modules. Package ipvs programs the virtual
// servers themselves and drives these through its Applier.
package ipvslink

import "errors"

// ErrNotAvailable is returned when the kernel has no IPVS: ip_vs is neither built in nor
// loaded, and could not be loaded. It is ipvs.ErrNotAvailable too.
var ErrNotAvailable = errors.New("ip_vs kernel module not available")

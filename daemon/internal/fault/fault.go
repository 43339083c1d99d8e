// Package fault lets the QEMU tests make one goroutine family of the daemon fail while
// traffic flows: a test image, built with the tag egfault, checks at each Point whether a
// test armed a fault there and, once, panics, blocks or allocates until the kernel kills
// the process. Without the tag (every image that ships) Point is empty and inlined away.
//
// A test arms a fault by writing a file named after the point into Dir (or DataDir) whose
// content is the kind, e.g. `echo panic > /run/edgegate/faults/dashboard-sampler` (or under a name
// starting with a dot, renamed into place). Within 100 ms, the first Point call that finds
// it removes the file, writes "egfault: injecting <kind> at <point>" to standard error and
// injects.
package fault

// Dir holds the armed faults, one file per point.
const Dir = "/run/edgegate/faults"

// DataDir holds faults armed on the data partition before the machine boots, for a test
// whose guest runs no test program of its own (the fleet's gateways): such a fault
// survives reboots until a Point takes it. One armed in Dir wins over one here.
const DataDir = "/var/lib/edgegate/faults"

// A Kind is what an armed point does to the goroutine that reaches it.
type Kind string

const (
	// Panic panics on the calling goroutine, with "egfault: <point>".
	Panic Kind = "panic"
	// Block blocks the calling goroutine forever: a deadlock, for the sync loop.
	Block Kind = "block"
	// Alloc allocates and touches memory until the process is killed (the cgroup's
	// memory limit); it never returns.
	Alloc Kind = "alloc"
)

// The points, one per goroutine family of the daemon. An informer handler's point runs
// only when the informer delivers a change: its doc says which changes make it run.
const (
	// Sync is the proxy's sync loop, at every sync (its Point is in daemon/app).
	Sync = "sync"
	// Update is the firmware's updater, which runs in PID 1's process: every request the
	// daemon makes on the control socket (daemon/pid1/ctl; a report every second) and
	// every health poll of a trial boot (daemon/update). PID 1 must outlive it.
	Update = "update"
	// ClusterInformer is the cluster source's informer handlers (daemon/source/cluster):
	// every add or update of a Service or an EndpointSlice (annotating a Service will do).
	ClusterInformer = "cluster-informer"
	// DashboardSampler is the dashboard's sampler loop (daemon/dashboard): every
	// Interval (1 s), or more rarely when reading the counters is slow.
	DashboardSampler = "dashboard-sampler"
	// DashboardWebsocket is a websocket client's reader goroutine (daemon/dashboard): when
	// a client connects, at each message it sends (the dashboard's page sends none) and at
	// each of its pongs (every two thirds of PongWait, 20 s).
	DashboardWebsocket = "dashboard-websocket"
	// LBLeases is the LoadBalancer's node-Lease informer handler (daemon/lb/member
	// LeaseWatch): every add or update of a Lease in kube-node-lease, i.e. each node's
	// heartbeat (every 10 s per node).
	LBLeases = "lb-leases"
	// LBAlloc is the LoadBalancer allocator's worker (daemon/lb/alloc), on the gateway
	// that leads: when it starts leading, at every change of a Service or of the pools,
	// and at each retry of a failed write.
	LBAlloc = "lb-alloc"
	// RolloutLease is the rollout slot Lease's renewer (daemon/update/rollout): every
	// RenewInterval while this gateway holds a slot, i.e. while it updates.
	RolloutLease = "rollout-lease"
	// LBHeartbeat is the LoadBalancer group's heartbeat loop (daemon/lb/member Group):
	// at each heartbeat sent (every Interval, 100 ms), link check and rejoin.
	LBHeartbeat = "lb-heartbeat"
	// LBAnnounce is the ARP/NDP announcer's loop (daemon/lb/announce): at each
	// announcement due, each Set and each retry of failed links (every 5 s).
	LBAnnounce = "lb-announce"
)

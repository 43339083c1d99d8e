package dashboard

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/proxy"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/view"
)

// Hub keys, what the web UI reads.
const (
	KeyFirmware  = "firmware"
	KeyServices  = "services"
	KeyTraffic   = "traffic"
	KeySyncs     = "syncs"
	KeyCluster   = "cluster"
	KeyNetwork   = "network"
	KeyLogs      = "logs"
	KeyDrain     = "drain"
	KeyLB        = "loadBalancer"
	KeyDaemon    = "daemon"
	KeyConntrack = "conntrack"
	KeyFastPath  = "fastPath"
)

// SyncLimit is how many syncs the history keeps.
const SyncLimit = 120

// Options configure a Dashboard.
type Options struct {
	Version  string
	Mode     plan.Mode // --proxy-mode
	Node     string
	Families []model.Family
	// Views shows the proxy mode's rules and traffic; nil takes them from the dataplane
	// Record wraps (proxy.Viewer), which reads its own kernel state.
	Views view.Source
	// Kernel reads addresses, routes and conntrack entries; nil shows none.
	Kernel Kernel
	// Token is the access token every request must carry.
	Token string
	Log   *slog.Logger
	Now   func() time.Time
	// Buffer is each websocket client's send buffer in messages (default 256).
	Buffer int
	// PongWait is how long a websocket client may leave a ping unanswered before it is
	// dropped (default 30s); pings go out at two thirds of it.
	PongWait time.Duration
	// Interval is how often the samplers read counters, the cluster link and the network
	// (default 1s); changes only are pushed.
	Interval time.Duration
	// Gate admits the dashboard's connections and makes its server (default: a gate of
	// its own with listener.Default).
	Gate *listener.Gate
	// Upload bounds a firmware upload (default: bundleUpload).
	Upload listener.Upload
}

// Kernel is what the dashboard reads from the kernel besides counters.
type Kernel interface {
	Network() (view.Network, error)
	// Conntrack lists the connection tracking entries of a family, one line each in
	// conntrack -L form.
	Conntrack(f model.Family) ([]string, error)
}

// Firmware is what the header shows.
type Firmware struct {
	Version string    `json:"version"`
	Mode    string    `json:"mode"`
	Node    string    `json:"node"`
	Started time.Time `json:"started"`
}

// DaemonRuns is what PID 1 says of the daemon's runs on the firmware: this process's run in
// this boot, the earlier runs' early ends by reason, and how the last one ended.
type DaemonRuns struct {
	Run      int            `json:"run"`
	Restarts map[string]int `json:"restarts"`
	LastExit string         `json:"lastExit,omitempty"`
}

// SetDaemonRuns shows the daemon's runs (only the firmware has them).
func (d *Dashboard) SetDaemonRuns(r DaemonRuns) { _ = d.hub.Set(KeyDaemon, r) }

// Conntrack is the connection tracking table's state, and the SYN proxy's, as the page
// shows it.
type Conntrack struct {
	Entries int `json:"entries"`
	Max     int `json:"max"`
	// Pressed: the table is 90% full or dropped or evicted connections since the last
	// read; Dropped and EarlyDrops are cumulative.
	Pressed    bool   `json:"pressed"`
	Dropped    uint64 `json:"dropped"`
	EarlyDrops uint64 `json:"earlyDrops"`
	// SynProxy counts SYNs answered with a cookie and handshakes completed; nil before
	// the kernel's SYN proxy was first used.
	SynProxy *SynProxy `json:"synProxy,omitempty"`
}

// SynProxy is the SYN proxy's counts.
type SynProxy struct {
	SYNs           uint64 `json:"syns"`
	Completed      uint64 `json:"completed"`
	InvalidCookies uint64 `json:"invalidCookies"`
}

// SetFastPath shows the interfaces the fast path's flowtable covers (none: off).
func (d *Dashboard) SetFastPath(devices []string) {
	_ = d.hub.Set(KeyFastPath, map[string]any{"devices": append([]string{}, devices...)})
}

// SetConntrack shows the connection tracking table's state.
func (d *Dashboard) SetConntrack(c Conntrack) { _ = d.hub.Set(KeyConntrack, c) }

// Service is one service port with its endpoints, as the UI lists it.
type Service struct {
	Name        string     `json:"name"`
	Type        string     `json:"type"`
	Protocol    string     `json:"protocol"`
	Port        uint16     `json:"port"`
	NodePort    uint16     `json:"nodePort,omitempty"`
	ClusterIPs  []string   `json:"clusterIPs"`
	ExternalIPs []string   `json:"externalIPs,omitempty"`
	LBIPs       []string   `json:"loadBalancerIPs,omitempty"`
	Endpoints   []Endpoint `json:"endpoints"`
	// Protection is the port's edgegate.dev/protection, as the annotation writes it.
	Protection string `json:"protection,omitempty"`
}

// Endpoint is one backend with its conditions.
type Endpoint struct {
	Addr        string `json:"addr"`
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	Node        string `json:"node,omitempty"`
	Zone        string `json:"zone,omitempty"`
}

// Sync is one programming of the data plane.
type Sync struct {
	Time     time.Time `json:"time"`
	Millis   float64   `json:"ms"`
	Full     bool      `json:"full"`
	Error    string    `json:"error,omitempty"`
	Chains   int       `json:"chains"`
	Elements int       `json:"elements"`
	Deleted  int       `json:"deleted"`
	// ProgrammingMillis is the longest network programming latency this sync completed:
	// from the EndpointSlice change the controller stamped to the rules being in place.
	ProgrammingMillis float64 `json:"programmingMs,omitempty"`
}

// Dashboard collects the daemon's state into a Hub and serves it.
type Dashboard struct {
	hub  *Hub
	opts Options

	mu          sync.Mutex
	snap        *model.Snapshot // last programmed
	cluster     func() ClusterLink
	lastTrigger map[model.ServicePortName]int64
	drain       func(on bool) bool
	drainState  DrainState
	lb          func() any
	updater     update.Updater
	views       view.Source // the recorded dataplane's, unless Options.Views
	// next is the plane Rebind asks for; rebind wakes Start to serve it.
	next   *Plane
	rebind chan struct{}
}

// New returns a dashboard; Run starts its samplers, Serve its HTTP server.
func New(o Options) *Dashboard {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Buffer == 0 {
		o.Buffer = 256
	}
	if o.PongWait == 0 {
		o.PongWait = 30 * time.Second
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Gate == nil {
		o.Gate = listener.NewGate("dashboard", listener.Default, nil, o.Log)
	}
	if o.Upload == (listener.Upload{}) {
		o.Upload = bundleUpload
	}
	d := &Dashboard{hub: NewHub(o.Buffer), opts: o, lastTrigger: map[model.ServicePortName]int64{}, rebind: make(chan struct{}, 1)}
	_ = d.hub.Set(KeyFirmware, Firmware{Version: o.Version, Mode: string(o.Mode), Node: o.Node, Started: o.Now()})
	_ = d.hub.Set(KeyServices, []Service{})
	_ = d.hub.Set(KeyCluster, map[string]any{"mode": "standalone"})
	_ = d.hub.Set(KeyDrain, DrainState{Reasons: []string{}})
	return d
}

// DrainState is whether the gateway drains (its /healthz fails, so load balancers steer
// away, and its Node is not ready), why, and whether the operator can drain it from here.
type DrainState struct {
	Draining bool     `json:"draining"`
	Reasons  []string `json:"reasons"`
	Action   bool     `json:"action"`
}

// OnDrain offers the operator's drain action: fn turns the operator's reason on or off and
// reports whether the gateway drains afterwards.
func (d *Dashboard) OnDrain(fn func(on bool) bool) {
	d.mu.Lock()
	d.drain = fn
	d.drainState.Action = true
	st := d.drainState
	d.mu.Unlock()
	_ = d.hub.Set(KeyDrain, st)
}

// ShowDrain shows the drain state, whatever changed it.
func (d *Dashboard) ShowDrain(draining bool, reasons []string) {
	d.mu.Lock()
	d.drainState.Draining, d.drainState.Reasons = draining, append([]string{}, reasons...)
	st := d.drainState
	d.mu.Unlock()
	_ = d.hub.Set(KeyDrain, st)
}

// Hub returns the dashboard's hub.
func (d *Dashboard) Hub() *Hub { return d.hub }

// LogHandler returns a handler that writes to next and to the dashboard's log tail.
func (d *Dashboard) LogHandler(next slog.Handler) slog.Handler { return Tee(next, d.hub) }

// ClusterLink is the gateway's connection to its cluster.
type ClusterLink struct {
	Mode string `json:"mode"` // "cluster"
	// Reachable: the API server answered the last request; Synced: every watch has listed.
	Reachable bool `json:"reachable"`
	Synced    bool `json:"synced"`
	// WatchesHealthy: every watch is open.
	WatchesHealthy bool `json:"watchesHealthy"`
	// FromCache: the programmed state came from the state directory, not the API server.
	FromCache    bool      `json:"fromCache"`
	LastContact  time.Time `json:"lastContact"`
	LeaseRenewed time.Time `json:"leaseRenewed"`
	Problem      string    `json:"problem,omitempty"`
}

// WatchCluster makes the dashboard show the cluster link that fn reports (sampled).
func (d *Dashboard) WatchCluster(fn func() ClusterLink) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cluster = fn
}

// WatchLoadBalancer makes the dashboard show what fn reports of the LoadBalancer IPs
// (sampled): the members, the addresses this gateway announces and who owns the others.
func (d *Dashboard) WatchLoadBalancer(fn func() any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lb = fn
}

// Record wraps a dataplane so that every Program call lands in the sync history and every
// programmed snapshot in the service list. A dataplane that shows its operator views
// (proxy.Viewer) answers the rules pages and the traffic from then on.
func (d *Dashboard) Record(dp proxy.Dataplane) proxy.Dataplane {
	if v, ok := dp.(proxy.Viewer); ok && v.OperatorViews() != nil {
		d.mu.Lock()
		d.views = v.OperatorViews()
		d.mu.Unlock()
	}
	return &recorder{Dataplane: dp, d: d}
}

// source returns what shows the mode's rules and traffic, nil before a dataplane with
// views was recorded.
func (d *Dashboard) source() view.Source {
	if d.opts.Views != nil {
		return d.opts.Views
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.views
}

type recorder struct {
	proxy.Dataplane
	d *Dashboard
}

// Pending passes IPVS's draining through: the proxier asks the dataplane it holds.
func (r *recorder) Pending() bool {
	dr, ok := r.Dataplane.(proxy.Draining)
	return ok && dr.Pending()
}

func (r *recorder) Program(snap *model.Snapshot, full bool) (proxy.Result, error) {
	start := r.d.opts.Now()
	res, err := r.Dataplane.Program(snap, full)
	end := r.d.opts.Now()
	s := Sync{Time: end, Millis: float64(end.Sub(start).Microseconds()) / 1000, Full: res.Full,
		Chains: res.Written, Elements: res.Elements, Deleted: res.Deleted}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.ProgrammingMillis = r.d.programmed(snap, end)
	}
	_ = r.d.hub.Append(KeySyncs, SyncLimit, s)
	return res, err
}

// programmed stores a snapshot now in the kernel and returns the longest network
// programming latency it completed, in milliseconds.
func (d *Dashboard) programmed(snap *model.Snapshot, now time.Time) float64 {
	d.mu.Lock()
	d.snap = snap
	var longest time.Duration
	seen := map[model.ServicePortName]int64{}
	for n, sp := range snap.Ports.All() {
		seen[n] = sp.TriggerTimeNanos
		if sp.TriggerTimeNanos > d.lastTrigger[n] {
			if l := now.Sub(time.Unix(0, sp.TriggerTimeNanos)); l > longest {
				longest = l
			}
		}
	}
	d.lastTrigger = seen
	d.mu.Unlock()
	_ = d.hub.Set(KeyServices, services(snap))
	return float64(longest.Microseconds()) / 1000
}

// Snapshot returns the last programmed snapshot, nil before the first sync.
func (d *Dashboard) Snapshot() *model.Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.snap
}

func services(snap *model.Snapshot) []Service {
	out := []Service{}
	for _, sp := range snap.Sorted() {
		s := Service{Name: sp.Name.String(), Type: string(sp.Type), Protocol: string(sp.Name.Protocol),
			Port: sp.Port, NodePort: sp.NodePort, ClusterIPs: addrs(sp.ClusterIPs), ExternalIPs: addrs(sp.ExternalIPs),
			Endpoints: []Endpoint{}}
		if sp.Protection.Any() {
			s.Protection = sp.Protection.String()
		}
		for _, ip := range sp.LoadBalancerIPs {
			s.LBIPs = append(s.LBIPs, ip.Addr.String())
		}
		for _, e := range sp.Endpoints {
			s.Endpoints = append(s.Endpoints, Endpoint{Addr: e.String(), Ready: e.Ready, Serving: e.Serving,
				Terminating: e.Terminating, Node: e.NodeName, Zone: e.Zone})
		}
		out = append(out, s)
	}
	return out
}

func addrs(as []netip.Addr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// samplerShare bounds the samplers' CPU: they wait at least this many times as long as a
// sample took. Reading 110,000 rule counters (10,000 Services x 10 endpoints) takes 0.6 s
// of netlink dumps, one per chain; sampling that every second would keep most of a core
// busy for a page nobody may watch.
const samplerShare = 10

// sampleWait is the time to wait after a sample that took took.
func sampleWait(interval, took time.Duration) time.Duration {
	return max(interval, samplerShare*took)
}

// Run samples counters, the cluster link and the network until ctx ends, and pushes what
// changed. The data plane's counters live in the kernel, which tells no one when they move.
// Samples are spaced by Interval, or further apart when they are slow (sampleWait).
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTimer(d.opts.Interval)
	defer t.Stop()
	stretched := false
	failed := map[string]bool{}
	report := func(what string, err error) {
		if err != nil && !failed[what] {
			d.opts.Log.Warn("dashboard cannot read "+what, "err", err)
		}
		failed[what] = err != nil
	}
	for {
		fault.Point(fault.DashboardSampler)
		began := time.Now()
		d.mu.Lock()
		snap, cluster, lb := d.snap, d.cluster, d.lb
		d.mu.Unlock()
		if lb != nil {
			if err := d.hub.Set(KeyLB, lb()); err != nil {
				report("the LoadBalancer IPs", err)
			}
		}
		if src := d.source(); src != nil && snap != nil {
			tr, err := src.Traffic(snap)
			report("traffic counters", err)
			if err == nil && tr != nil { // nil: the mode counts none
				_ = d.hub.Set(KeyTraffic, tr)
			}
		}
		if cluster != nil {
			if err := d.hub.Set(KeyCluster, cluster()); err != nil {
				report("the cluster link", err)
			}
		}
		if d.opts.Kernel != nil {
			n, err := d.opts.Kernel.Network()
			report("addresses and routes", err)
			if err == nil {
				_ = d.hub.Set(KeyNetwork, n)
			}
		}
		took := time.Since(began)
		wait := sampleWait(d.opts.Interval, took)
		if long := wait > d.opts.Interval; long != stretched {
			stretched = long
			if long {
				d.opts.Log.Info("dashboard samples less often: reading the counters is slow", "took", took, "every", wait)
			} else {
				d.opts.Log.Info("dashboard samples at its interval again", "every", wait)
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

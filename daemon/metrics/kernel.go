package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/view"
)

// KernelSources read, at each scrape, what the kernel counts for the gateway: the
// connection tracking table and the SYN proxy, and the refusals of the protected service
// ports. Either may be nil.
type KernelSources struct {
	Conntrack func() (conntrack.Stats, error)
	Refusals  func() (map[string]view.Refusals, error)
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

var (
	ctEntries      = desc("conntrack_entries", "Entries in the connection tracking table of the gateway's network namespace (nf_conntrack_count)")
	ctMax          = desc("conntrack_max", "The connection tracking table's size (nf_conntrack_max)")
	ctDrops        = desc("conntrack_dropped_total", "New connections the kernel dropped because the connection tracking table was full")
	ctEarlyDrops   = desc("conntrack_early_drops_total", "Connection tracking entries the kernel evicted to make room for new connections")
	ctInsertFailed = desc("conntrack_insert_failed_total", "Connection tracking entries the kernel could not insert")
	ctInvalid      = desc("conntrack_invalid_packets_total", "Packets connection tracking found invalid")
	spSyn          = desc("synproxy_syns_total", "SYNs the SYN proxy answered with a cookie")
	spValid        = desc("synproxy_cookies_valid_total", "Handshakes the SYN proxy completed: the client's ACK carried a valid cookie")
	spInvalid      = desc("synproxy_cookies_invalid_total", "ACKs the SYN proxy dropped: no valid cookie (forged, expired, or a flow picked up in mid-stream)")
	spRetrans      = desc("synproxy_cookies_retransmitted_total", "Handshakes the SYN proxy saw retransmitted")
	spReopened     = desc("synproxy_connections_reopened_total", "Connections the SYN proxy saw reopened")
	refused        = desc("protection_refused_connections_total",
		"New connections refused by a service port's per-source limits, by service port and by limit (rate, conns)", "service_port", "reason")
	kernelErrors = desc("kernel_stats_read_errors_total", "Scrapes that could not read a kernel statistic, by source (conntrack, refusals)", "source")
)

type kernelCollector struct {
	src KernelSources

	mu     sync.Mutex // scrapes may run at once
	errors map[string]float64
}

func (c *kernelCollector) failed(source string) {
	c.mu.Lock()
	c.errors[source]++
	c.mu.Unlock()
}

func (c *kernelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ctEntries, ctMax, ctDrops, ctEarlyDrops, ctInsertFailed, ctInvalid,
		spSyn, spValid, spInvalid, spRetrans, spReopened, refused, kernelErrors} {
		ch <- d
	}
}

func (c *kernelCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Conntrack != nil {
		if s, err := c.src.Conntrack(); err != nil {
			c.failed("conntrack")
		} else {
			gauge := func(d *prometheus.Desc, v int) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
			}
			count := func(d *prometheus.Desc, v uint64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
			}
			gauge(ctEntries, s.Entries)
			gauge(ctMax, s.Max)
			count(ctDrops, s.Drop)
			count(ctEarlyDrops, s.EarlyDrop)
			count(ctInsertFailed, s.InsertFailed)
			count(ctInvalid, s.Invalid)
			if sp := s.SynProxy; sp != nil {
				count(spSyn, sp.SynReceived)
				count(spValid, sp.CookieValid)
				count(spInvalid, sp.CookieInvalid)
				count(spRetrans, sp.CookieRetrans)
				count(spReopened, sp.ConnReopened)
			}
		}
	}
	if c.src.Refusals != nil {
		if r, err := c.src.Refusals(); err != nil {
			c.failed("refusals")
		} else {
			for port, n := range r {
				ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(n.Rate), port, "rate")
				ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(n.Conns), port, "conns")
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, source := range []string{"conntrack", "refusals"} {
		ch <- prometheus.MustNewConstMetric(kernelErrors, prometheus.CounterValue, c.errors[source], source)
	}
}

// WatchKernel reports what src reads at every scrape. Call it once. The reads are cheap:
// a few /proc files, the protect chains of one table.
func (m *Metrics) WatchKernel(src KernelSources) {
	m.reg.MustRegister(&kernelCollector{src: src, errors: map[string]float64{}})
}

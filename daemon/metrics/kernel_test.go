package metrics

import (
	"errors"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/view"
)

func TestKernelStatsAreScraped(t *testing.T) {
	m := New()
	stats := conntrack.Stats{Entries: 262144, Max: 262144, Drop: 17, EarlyDrop: 5, InsertFailed: 2, Invalid: 9,
		SynProxy: &conntrack.SynProxyStats{SynReceived: 120000, CookieValid: 150, CookieInvalid: 3, CookieRetrans: 1}}
	var fail error
	m.WatchKernel(KernelSources{
		Conntrack: func() (conntrack.Stats, error) { return stats, fail },
		Refusals: func() (map[string]view.Refusals, error) {
			return map[string]view.Refusals{"default/web:http": {Rate: 4, Conns: 2}}, fail
		},
	})
	expect(t, scrape(t, m), map[string]float64{
		"edgegate_conntrack_entries":                    262144,
		"edgegate_conntrack_max":                        262144,
		"edgegate_conntrack_dropped_total":              17,
		"edgegate_conntrack_early_drops_total":          5,
		"edgegate_conntrack_insert_failed_total":        2,
		"edgegate_conntrack_invalid_packets_total":      9,
		"edgegate_synproxy_syns_total":                  120000,
		"edgegate_synproxy_cookies_valid_total":         150,
		"edgegate_synproxy_cookies_invalid_total":       3,
		"edgegate_synproxy_cookies_retransmitted_total": 1,
		`edgegate_protection_refused_connections_total{reason="rate",service_port="default/web:http"}`:  4,
		`edgegate_protection_refused_connections_total{reason="conns",service_port="default/web:http"}`: 2,
		`edgegate_kernel_stats_read_errors_total{source="conntrack"}`:                                   0,
	})
	// A read that fails is counted, and its series are left out rather than reported as 0.
	fail = errors.New("no /proc")
	s := scrape(t, m)
	expect(t, s, map[string]float64{
		`edgegate_kernel_stats_read_errors_total{source="conntrack"}`: 1,
		`edgegate_kernel_stats_read_errors_total{source="refusals"}`:  1,
	})
	if _, ok := s["edgegate_conntrack_entries"]; ok {
		t.Error("a failed read still reports the table's entries")
	}
	// Without a SYN proxy in use, its series are absent.
	fail, stats.SynProxy = nil, nil
	if _, ok := scrape(t, m)["edgegate_synproxy_syns_total"]; ok {
		t.Error("synproxy series without synproxy statistics")
	}
}

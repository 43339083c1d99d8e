package lab

import "testing"

// TestMetricsURL: StartDaemon waits for the first sync on the metrics the daemon was told
// to serve.
func TestMetricsURL(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, MetricsURL},
		{DaemonArgs("nftables", "/m"), "http://127.0.0.1:10249/metrics"},
		{[]string{"--metrics-bind-address=0.0.0.0:9100"}, "http://127.0.0.1:9100/metrics"},
		{[]string{"--metrics-bind-address", "10.200.1.1:9100", "--proxy-mode=ipvs"}, "http://10.200.1.1:9100/metrics"},
		{[]string{"-metrics-bind-address", "[::]:9100"}, "http://127.0.0.1:9100/metrics"},
		{[]string{"--metrics-bind-address", "127.0.0.1:1", "--metrics-bind-address="}, ""},
	} {
		if got := metricsURL(tc.args); got != tc.want {
			t.Errorf("metricsURL(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

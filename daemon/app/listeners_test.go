package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/edgegate/edgegate/daemon/metrics"
)

// TestProfilingIsOptIn: /debug/pprof/ is served on the metrics address only with
// --profiling (or enableProfiling in the file), like kube-proxy's.
func TestProfilingIsOptIn(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil || c.EnableProfiling {
		t.Fatalf("default: profiling %v, err %v; want off", c.EnableProfiling, err)
	}
	for _, args := range [][]string{{"--profiling"}, {"--config", writeFile(t, "enableProfiling: true\n")}} {
		if c, err := ParseConfig(args); err != nil || !c.EnableProfiling {
			t.Errorf("%v: profiling %v, err %v; want on", args, c.EnableProfiling, err)
		}
	}
	m := metrics.New()
	for _, profiling := range []bool{false, true} {
		pprofWant := http.StatusNotFound
		if profiling {
			pprofWant = http.StatusOK
		}
		srv := httptest.NewServer(metricsMux(m, profiling))
		for path, want := range map[string]int{
			"/metrics":                  http.StatusOK,
			"/debug/pprof/heap?debug=1": pprofWant,
			"/debug/pprof/":             pprofWant,
		} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("profiling %v: GET %s: %d, want %d", profiling, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}

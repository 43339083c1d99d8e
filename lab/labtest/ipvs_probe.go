package labtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/lab/whoami"

	"github.com/edgegate/edgegate/lab"
)

// Helpers of ipvs mode's scenarios: reading virtual servers and their counters back, and
// probing from chosen sources.

// virtualServer reads one virtual server of the gateway or fails the test.
func virtualServer(t *testing.T, l *lab.Lab, proto, addr string) ipvs.Entry {
	t.Helper()
	entries, err := l.Gateway.IPVS()
	if err != nil {
		t.Fatal(err)
	}
	e, err := lab.KernelState{HasIPVS: true, IPVS: entries}.VirtualServer(proto, addr)
	if err != nil {
		t.Fatalf("%v:\n%s", err, ipvs.Format(entries, false))
	}
	return e
}

func destination(e ipvs.Entry, ap netip.AddrPort) (ipvs.Destination, bool) {
	i := slices.IndexFunc(e.Destinations, func(d ipvs.Destination) bool { return d.AddrPort() == ap })
	if i < 0 {
		return ipvs.Destination{}, false
	}
	return e.Destinations[i], true
}

// settledStats waits until a virtual server's counters show conns connections and stop
// changing. The kernel folds its per-CPU counters into what it reports every 2 seconds
// (the rate estimator's period), so a read right after the traffic lags.
func settledStats(t *testing.T, l *lab.Lab, proto, addr string, conns int) ipvs.Entry {
	t.Helper()
	var last ipvs.Entry
	var lastAt time.Time
	deadline := time.Now().Add(15 * time.Second)
	for {
		e := virtualServer(t, l, proto, addr)
		now := time.Now()
		switch {
		case int(e.Stats.Connections) != conns:
			last, lastAt = ipvs.Entry{}, time.Time{}
		case lastAt.IsZero() || !sameStats(e, last):
			last, lastAt = e, now
		case now.Sub(lastAt) > 2500*time.Millisecond:
			return e
		}
		if now.After(deadline) {
			t.Fatalf("%s %s: counters did not settle at %d connections within 15s:\n%s", proto, addr, conns, ipvs.Format([]ipvs.Entry{e}, true))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sameStats(a, b ipvs.Entry) bool {
	if a.Stats != b.Stats || len(a.Destinations) != len(b.Destinations) {
		return false
	}
	for i := range a.Destinations {
		if a.Destinations[i].Stats != b.Destinations[i].Stats {
			return false
		}
	}
	return true
}

// backendOf names the backend with address a.
// dashboardShowsStats checks that the daemon's dashboard reports a service port's traffic as
// the kernel counted it in e, its only virtual server: connections, packets and bytes both
// ways, for it and each real server. It asks /api/traffic, which reads the counters at the
// request, rather than wait for the page's sampler (slow in the arm64 TCG guest, slower on a
// busy host); the short bound only rides out a connection still closing.
func dashboardShowsStats(t *testing.T, l *lab.Lab, service string, e ipvs.Entry) {
	t.Helper()
	type counts struct{ Connections, Packets, Bytes uint64 }
	of := func(c ipvs.Counters) counts {
		return counts{uint64(c.Connections), uint64(c.PacketsIn) + uint64(c.PacketsOut), c.BytesIn + c.BytesOut}
	}
	want := map[string]counts{"": of(e.Stats)}
	for _, d := range e.Destinations {
		want[d.AddrPort().String()] = of(d.Stats)
	}
	eventually(t, 10*time.Second, "the dashboard shows "+service+"'s IPVS counters", func() (bool, string) {
		var traffic map[string]struct {
			counts
			Backends map[string]counts
		}
		if err := l.DashboardTraffic(&traffic); err != nil {
			return false, err.Error()
		}
		st := traffic[service]
		got := map[string]counts{"": st.counts}
		maps.Copy(got, st.Backends)
		return maps.Equal(got, want), fmt.Sprintf("dashboard %+v, kernel %+v", got, want)
	})
}

func backendOf(l *lab.Lab, a netip.Addr) string {
	for _, b := range l.Backends {
		if b.IPv4 == a || b.IPv6 == a {
			return b.Name
		}
	}
	return a.String()
}

// exchanged is one HTTP exchange with its byte counts (TCP data, no headers).
type exchanged struct {
	backend        string
	sent, received int
}

// exchange makes one HTTP request on a connection of its own, closed by the server after
// the answer, and counts the bytes each way.
func exchange(h *lab.Host, addr string) (exchanged, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lab.DialTimeout)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return exchanged{}, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(lab.ExchangeTimeout)); err != nil {
		return exchanged{}, err
	}
	req := "GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return exchanged{}, err
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		return exchanged{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		return exchanged{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return exchanged{}, err
	}
	reply, err := whoami.Parse(string(body))
	if err != nil {
		return exchanged{}, err
	}
	return exchanged{backend: reply.Backend, sent: len(req), received: len(raw)}, nil
}

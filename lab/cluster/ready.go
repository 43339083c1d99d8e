package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// pollEvery paces readiness probes.
const pollEvery = 200 * time.Millisecond

// waitEtcd waits until etcd reports itself healthy.
func (c *Cluster) waitEtcd(ctx context.Context, clientURL string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: c.ns.dial}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	return waitReady(ctx, c.etcd, etcdReadyWithin, func() (bool, string) {
		return probe(client, clientURL+"/health", "", `"health":"true"`)
	})
}

// waitAPIServer waits until p answers /readyz with "ok": etcd reached, RBAC's bootstrap roles
// written, every post-start hook done.
func (c *Cluster) waitAPIServer(ctx context.Context, p *process) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.CAPEM)
	client := &http.Client{
		Transport: &http.Transport{DialContext: c.ns.dial, TLSClientConfig: &tls.Config{RootCAs: roots}},
		Timeout:   5 * time.Second,
	}
	defer client.CloseIdleConnections()
	return waitReady(ctx, p, apiserverReadyWithin, func() (bool, string) {
		return probe(client, c.Server+"/readyz", c.AdminToken, "ok")
	})
}

// waitReady calls ready until it says yes, p exits, ctx ends or within passes; the errors
// carry the last answer and the end of p's log.
func waitReady(ctx context.Context, p *process, within time.Duration, ready func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ok, last := ready()
		if ok {
			return nil
		}
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); log:\n%s", p.name, err, p.tail(30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last answer: %s); log:\n%s", p.name, ctx.Err(), last, p.tail(30))
		case <-tick.C:
		}
	}
}

// probe GETs url and reports whether it answered 200 with a body containing want.
func probe(client *http.Client, url, token, want string) (bool, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	answer := fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), want), answer
}

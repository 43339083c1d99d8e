// Package services writes the Services and EndpointSlices the data-plane and boot benchmarks
// load into edgegate from a manifests directory (standalone mode): N ClusterIP Services of
// one TCP port, each with the same number of ready endpoints, as one JSON stream. Only the
// Services named by Spec.Target point at real backends; the others point at addresses
// that never carry traffic, and exist to make the rule set as large as a real cluster's.
package services

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
)

// Namespace holds every Service written.
const Namespace = "bench"

// Ports of every Service: port 80 to target port 8080, TCP.
const (
	Port       = 80
	TargetPort = 8080
)

// firstClusterIP is Service 0's ClusterIP; Service i has firstClusterIP+i. 10.96.0.0/16
// holds MaxCount of them.
var firstClusterIP = netip.MustParseAddr("10.96.0.1")

// fillerBase is where the endpoints of the Services without real backends start:
// 10.64.0.0/10 holds 4M addresses, enough for MaxCount × MaxEndpoints.
var fillerBase = netip.MustParseAddr("10.64.0.1")

// Limits of a Spec.
const (
	MaxCount     = 65000
	MaxEndpoints = 64
)

// Spec says what to write.
type Spec struct {
	// Count is the number of Services.
	Count int
	// Endpoints is the number of ready endpoints of each Service (default 1).
	Endpoints int
	// Target, when set, maps a Service index to the real backend addresses its endpoints
	// use instead of filler addresses (Endpoints of them, repeated if fewer are given).
	Target map[int][]netip.Addr
	// LoadBalancer makes the Services it indexes of type LoadBalancer, with that ingress
	// IP and node port (externalTrafficPolicy Cluster).
	LoadBalancer map[int]LoadBalancer
}

// LoadBalancer is a LoadBalancer Service's address and node port.
type LoadBalancer struct {
	IP       netip.Addr
	NodePort uint16
}

// Name is Service i's name; names sort in index order, so the last index is the last
// Service in edgegate's sorted rule layout (iptables mode walks its SERVICES chain in
// that order).
func Name(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ClusterIP is Service i's ClusterIP.
func ClusterIP(i int) netip.Addr { return plus(firstClusterIP, i) }

// plus returns the IPv4 address n after a.
func plus(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (s Spec) check() error {
	switch {
	case s.Count < 1 || s.Count > MaxCount:
		return fmt.Errorf("services: Spec.Count %d: want 1..%d", s.Count, MaxCount)
	case s.Endpoints < 1 || s.Endpoints > MaxEndpoints:
		return fmt.Errorf("services: Spec.Endpoints %d: want 1..%d", s.Endpoints, MaxEndpoints)
	}
	for i, lb := range s.LoadBalancer {
		if i < 0 || i >= s.Count || !lb.IP.Is4() || lb.NodePort < 30000 || lb.NodePort > 32767 {
			return fmt.Errorf("services: Spec.LoadBalancer[%d]: %s:%d: want an index of a Service, an IPv4 address, a node port in 30000-32767", i, lb.IP, lb.NodePort)
		}
	}
	for i, addrs := range s.Target {
		if i < 0 || i >= s.Count {
			return fmt.Errorf("services: Spec.Target: Service index %d outside 0..%d", i, s.Count-1)
		}
		if len(addrs) == 0 {
			return fmt.Errorf("services: Spec.Target[%d]: no backend address", i)
		}
		for _, a := range addrs {
			if !a.Is4() {
				return fmt.Errorf("services: Spec.Target[%d]: %s is not an IPv4 address", i, a)
			}
		}
	}
	return nil
}

// Write writes the Services and their EndpointSlices to w as a stream of JSON objects,
// one per line (what the daemon's manifests source reads from a *.json file). The text is
// written by hand, not through the API types' encoders: at 30k Services that is seconds
// less inside a TCG-emulated guest, and the test checks it against the daemon's loader.
func Write(w io.Writer, s Spec) error {
	if s.Endpoints == 0 {
		s.Endpoints = 1
	}
	if err := s.check(); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	filler := fillerBase
	for i := range s.Count {
		name, vip := Name(i), ClusterIP(i)
		if lb, ok := s.LoadBalancer[i]; ok {
			fmt.Fprintf(bw, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":%q},`+
				`"spec":{"type":"LoadBalancer","clusterIP":%q,"clusterIPs":[%q],"ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack",`+
				`"externalTrafficPolicy":"Cluster","ports":[{"name":"http","protocol":"TCP","port":%d,"targetPort":%d,"nodePort":%d}]},`+
				`"status":{"loadBalancer":{"ingress":[{"ip":%q}]}}}`+"\n",
				name, Namespace, vip, vip, Port, TargetPort, lb.NodePort, lb.IP)
		} else {
			fmt.Fprintf(bw, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":%q},`+
				`"spec":{"type":"ClusterIP","clusterIP":%q,"clusterIPs":[%q],"ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack",`+
				`"ports":[{"name":"http","protocol":"TCP","port":%d,"targetPort":%d}]}}`+"\n",
				name, Namespace, vip, vip, Port, TargetPort)
		}
		fmt.Fprintf(bw, `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"%s-0","namespace":%q,`+
			`"labels":{"kubernetes.io/service-name":%q}},"addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":%d}],"endpoints":[`,
			name, Namespace, name, TargetPort)
		target := s.Target[i]
		for j := range s.Endpoints {
			addr := filler
			if target != nil {
				addr = target[j%len(target)]
			} else {
				filler = filler.Next()
			}
			if j > 0 {
				bw.WriteByte(',')
			}
			fmt.Fprintf(bw, `{"addresses":[%q],"conditions":{"ready":true,"serving":true,"terminating":false}}`, addr)
		}
		bw.WriteString("]}\n")
	}
	return bw.Flush()
}

// WriteDir writes the manifests as dir/services.json (dir is created), replacing what an
// earlier call left there, and returns the file's path.
func WriteDir(dir string, s Spec) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("services: %w", err)
	}
	path := filepath.Join(dir, "services.json")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("services: %w", err)
	}
	err = Write(f, s)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("services: %s: %w", path, cerr)
	}
	if err != nil {
		return "", errors.Join(err, os.Remove(path))
	}
	return path, nil
}

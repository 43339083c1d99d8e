package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"k8s.io/client-go/kubernetes"
)

// Remote is what a test on another machine needs to use a running cluster as its own: a
// QEMU guest, whose programs reach the host's apiserver and etcd through QEMU's guestfwd at
// addresses of the guest's network. It travels in a test's argument line (Encode).
type Remote struct {
	Server       string `json:"server"`  // the apiserver's URL as the other machine reaches it
	EtcdURL      string `json:"etcdURL"` // etcd's client URL as the other machine reaches it
	CAPEM        []byte `json:"ca"`
	AdminToken   string `json:"adminToken"`
	GatewayToken string `json:"gatewayToken"`
}

// Remote describes c as reached at server and etcdURL.
func (c *Cluster) Remote(server, etcdURL string) Remote {
	return Remote{Server: server, EtcdURL: etcdURL, CAPEM: c.CAPEM, AdminToken: c.AdminToken, GatewayToken: c.GatewayToken}
}

// Encode is r as one word, for a command line.
func (r Remote) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings and bytes always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeRemote reads what Encode wrote.
func DecodeRemote(s string) (Remote, error) {
	var r Remote
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err == nil && (r.Server == "" || r.EtcdURL == "" || len(r.CAPEM) == 0 || r.AdminToken == "" || r.GatewayToken == "") {
		err = errors.New("server, etcdURL, ca and both tokens are required")
	}
	if err != nil {
		return Remote{}, fmt.Errorf("cluster description: %w", err)
	}
	return r, nil
}

// Attach uses a cluster that runs elsewhere: its clients reach r.Server through dial (nil
// dials from the caller's namespace). It runs nothing: Stop does nothing, Restart fails,
// Close leaves the cluster to its owner, and there are no kubeconfig or log files.
func Attach(r Remote, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Cluster, error) {
	c := &Cluster{Server: r.Server, EtcdURL: r.EtcdURL, CAPEM: r.CAPEM, AdminToken: r.AdminToken,
		GatewayToken: r.GatewayToken, dial: dial, attached: true}
	var err error
	if c.Client, err = kubernetes.NewForConfig(c.AdminConfig()); err != nil {
		return nil, fmt.Errorf("attach to %s: %w", r.Server, err)
	}
	return c, nil
}

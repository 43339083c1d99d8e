package lb

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/labtest"
)

// TestDashboardLeavesPoolInterfaces: on its default address, node-ip:443, a gateway's
// dashboard leaves out a node IP whose interface carries LoadBalancer pools, also when the
// pools are the cluster's ConfigMap, read after the start, and it follows the ConfigMap:
// pools moved off the node IP's interface open the dashboard there, pools moved back close
// it again. The client on the front segment is inside the default allow-list, so only the
// pools keep it out.
func TestDashboardLeavesPoolInterfaces(t *testing.T) {
	site := labtest.NewSite(t, lab.SiteOptions{Prefix: "egd", Gateways: 1})
	c, args := startCluster(t, site) // the pools on eth0, where the node IP is
	createKeySecret(t, c, []byte(rand.Text()))
	gw := site.Gateways[0]
	d := labtest.StartDaemon(t, gw, append(args(0), "--dashboard-bind-address", "node-ip:443")...)
	addr := net.JoinHostPort(gw.IPv4.String(), "443")
	handshake := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		conn, err := site.Client.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		return tls.Client(conn, &tls.Config{InsecureSkipVerify: true}).HandshakeContext(ctx)
	}
	setInterfaces := func(ifc string) {
		t.Helper()
		cms := c.Client.CoreV1().ConfigMaps("kube-system")
		cm, err := cms.Get(t.Context(), "edgegate-lb-pools", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["pools.yaml"] = strings.Replace(lab.SitePoolsYAML, "interfaces: [eth0]", "interfaces: ["+ifc+"]", 1)
		if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The pools are the ConfigMap's once the log says why the node IP is left out (until
	// then the dashboard may be on it: the start does not wait for the apiserver).
	why := []string{"not on node IP " + gw.IPv4.String(), "which carries LoadBalancer pool site"}
	left := func(what string) {
		t.Helper()
		start := time.Now()
		poll(t, 60*time.Second, what, func() (bool, string) {
			_, logged := d.LogLine(why...)
			err := handshake()
			return logged && err != nil, fmt.Sprintf("reason logged %t; TLS handshake with %s: %v", logged, addr, err)
		})
		t.Logf("%s after %v: %v", what, time.Since(start).Round(time.Millisecond), handshake())
	}

	left("the dashboard leaves " + addr + ": eth0 carries pool site")
	line, _ := d.LogLine(why...)
	t.Logf("log: %s", line)

	setInterfaces("eth1")
	start := time.Now()
	poll(t, 60*time.Second, "the dashboard serves "+addr+" once no pool is on eth0", func() (bool, string) {
		err := handshake()
		return err == nil, fmt.Sprintf("TLS handshake with %s: %v", addr, err)
	})
	t.Logf("%s answers TLS %v after the pools moved to eth1", addr, time.Since(start).Round(time.Millisecond))

	setInterfaces("eth0")
	left("the dashboard leaves " + addr + " again: the pools are back on eth0")
}

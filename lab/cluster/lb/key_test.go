package lb

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgegate/edgegate/daemon/lb/member"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/labtest"
)

// signedWith reports whether datagram b is a heartbeat signed with key.
func signedWith(b []byte, key []byte) bool {
	body, mac, _ := strings.Cut(string(b), "\n")
	got, err := hex.DecodeString(mac)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return err == nil && hmac.Equal(got, m.Sum(nil))
}

// TestHeartbeatKeyFromSecret: a gateway announcing LoadBalancer IPs in a cluster, with no
// --lb-key-file and nothing but deploy/rbac.yaml's permissions, takes its heartbeat key
// from the Secret kube-system/edgegate-lb-heartbeat-key. Without the Secret it refuses to
// announce (no heartbeat on the segment, no ARP reply for its Service's address, a log line
// naming the Secret) while its proxy runs; once the Secret is created it signs its
// heartbeats with that key and answers for the address; a change of the Secret (a
// rotation) is taken without a restart.
func TestHeartbeatKeyFromSecret(t *testing.T) {
	site := labtest.NewSite(t, lab.SiteOptions{Prefix: "egk", Gateways: 1})
	c, args := startCluster(t, site)
	ctx := t.Context()
	ip := lab.SitePool4[0]
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{
			Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(lab.BackendTCPPort)}}},
	}
	created, err := c.Client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip.String()}}
	if _, err := c.Client.CoreV1().Services(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createEndpoints(t, c)
	tap, err := site.Client.TapHeartbeats()
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	watch, err := site.Client.WatchARP(ip, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	gw := site.Gateways[0]
	all := func(member.Heartbeat) bool { return true }

	// No Secret: healthy and synced (StartDaemon waits for both), silent on the segment.
	d := labtest.StartDaemon(t, gw, args(0)...)
	poll(t, 30*time.Second, "the gateway says why it does not announce", func() (bool, string) {
		line, ok := d.LogLine("NOT announced", "secret=kube-system/edgegate-lb-heartbeat-key")
		return ok, line
	})
	line, _ := d.LogLine("NOT announced", "secret=kube-system/edgegate-lb-heartbeat-key")
	t.Logf("without the Secret: %s", line)
	quiet := time.Now()
	time.Sleep(3 * time.Second)
	if n := watch.RepliesSince(quiet); n != 0 {
		t.Errorf("without the key Secret, %d ARP replies for %s in 3 s, want none", n, ip)
	}
	if hb := tap.Captured(gw.IPv4, all); len(hb) != 0 {
		t.Errorf("without the key Secret, %d heartbeats sent, want none (first: %q)", len(hb), hb[0].Data)
	}

	// The Secret appears: signed heartbeats, and the address answered.
	key := []byte(rand.Text())
	createKeySecret(t, c, key)
	if _, err := site.Through(ip.String()+":80", []string{mustMAC(t, gw)}, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	hbs := tap.Captured(gw.IPv4, all)
	if len(hbs) == 0 || !signedWith(hbs[len(hbs)-1].Data, key) {
		t.Fatalf("%d heartbeats heard, the last not signed with the Secret's key", len(hbs))
	}
	t.Logf("with the Secret: %d heartbeats heard, signed with its key; %s answered", len(hbs), ip)

	// A rotation: the Secret's key changes, and the old one is still taken (data.accept).
	next := []byte(rand.Text())
	sec, err := c.Client.CoreV1().Secrets(member.KeySecretNamespace).Get(ctx, member.KeySecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{member.KeySecretKey: next, member.KeySecretAccept: key}
	if _, err := c.Client.CoreV1().Secrets(member.KeySecretNamespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "heartbeats signed with the rotated key", func() (bool, string) {
		hbs := tap.Captured(gw.IPv4, all)
		return signedWith(hbs[len(hbs)-1].Data, next), fmt.Sprintf("%d heartbeats", len(hbs))
	})
	if _, ok := d.LogLine("heartbeat key read", "accepting=2"); !ok {
		t.Error("no log line of the rotated key read")
	}
	if _, err := site.Through(ip.String()+":80", []string{mustMAC(t, gw)}, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func mustMAC(t *testing.T, h *lab.Host) string {
	t.Helper()
	mac, err := h.MAC("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// Command egdemo is the demo's cluster side: it runs a real kube-apiserver (and etcd) inside
// one of the demo's network namespaces, creates the gateway's RBAC from deploy/ and the demo's
// Services and EndpointSlices, hands the gateway its identity, and shows the cluster's Nodes.
// lab/demo.sh drives it; it is not part of the firmware.
//
//	egdemo cluster -netns NS -address IP -dir DIR    runs until SIGINT/SIGTERM
//	egdemo nodes -kubeconfig FILE [-wait NAME]       (inside NS: ip netns exec NS egdemo nodes ...)
//	egdemo boot -uefi-vars V -disk D -console F -tap T...
//	egdemo boot -kernel K -initramfs I -console F -tap T... -disk D -append ARG...
//	                                                 boots the firmware as the gateway (inside NS)
//	egdemo forward -listen 127.0.0.1:PORT -netns NS -to ADDR:PORT
//	                                                 the dashboard on the host's loopback
//	egdemo update -url https://127.0.0.1:PORT -token-file F -spki PIN [-bundle B | -wait D]
//	                                                 uploads an update, or shows slots and history
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgegate/edgegate/lab/cluster"
)

// gatewayGroup is the group deploy/rbac.yaml binds; the demo's token puts the gateway in it,
// as a bootstrap token made with deploy/README.md's recipe would.
const gatewayGroup = "system:bootstrappers:edgegate"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "cluster":
		err = runCluster(ctx, os.Args[2:])
	case "nodes":
		err = runNodes(ctx, os.Args[2:])
	case "boot":
		err = runBoot(ctx, os.Args[2:])
	case "forward":
		err = runForward(ctx, os.Args[2:])
	case "update":
		err = runUpdate(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "egdemo:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: egdemo cluster -netns NS -address IP -dir DIR [-manifests FILE...]\n       egdemo nodes -kubeconfig FILE [-wait NAME -timeout D]\n       egdemo boot (-uefi-vars V | -kernel K -initramfs I) -console F [-board B -tap T... -disk D... -append ARG...]\n       egdemo forward -listen 127.0.0.1:PORT -netns NS -to ADDR:PORT\n       egdemo update -url https://127.0.0.1:PORT -token-file F -spki PIN [-bundle B | -wait D]")
	os.Exit(2)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runCluster starts the cluster, fills it, writes the gateway's files into DIR/gateway
// (server, token, ca.crt, kubeconfig) and DIR/admin.kubeconfig, prints "ready" and waits for
// a signal; then it stops the apiserver and etcd.
func runCluster(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	netns := fs.String("netns", "", "network namespace to run etcd and the apiserver in")
	address := fs.String("address", "127.0.0.1", "address the apiserver listens on (in -netns)")
	dir := fs.String("dir", "", "directory for the cluster's state and the gateway's files (required)")
	rbac := fs.String("rbac", "deploy/rbac.yaml", "the gateway's RBAC")
	var files listFlag
	fs.Var(&files, "manifests", "YAML file of objects to create (repeatable)")
	_ = fs.Parse(args)
	if *dir == "" {
		return errors.New("cluster: -dir is required")
	}
	addr, err := netip.ParseAddr(*address)
	if err != nil {
		return fmt.Errorf("cluster: -address: %w", err)
	}
	started := time.Now()
	bins, err := cluster.Build(ctx, os.Stderr)
	if err != nil {
		return err
	}
	c, err := cluster.Launch(ctx, cluster.Options{
		Binaries: bins, NetNS: *netns, Address: addr, Dir: filepath.Join(*dir, "cluster"),
		GatewayUser: "system:bootstrap:demo01", GatewayGroups: []string{gatewayGroup},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, f := range append([]string{*rbac}, files...) {
		created, err := cluster.ApplyFile(ctx, c.Client, f)
		if err != nil {
			return err
		}
		fmt.Printf("egdemo: created from %s: %s\n", f, strings.Join(created, ", "))
	}
	gw := filepath.Join(*dir, "gateway")
	if err := os.MkdirAll(gw, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"server": []byte(c.Server + "\n"), "token": []byte(c.GatewayToken + "\n"), "ca.crt": c.CAPEM,
	} {
		if err := os.WriteFile(filepath.Join(gw, name), data, 0o600); err != nil {
			return err
		}
	}
	for src, dst := range map[string]string{c.GatewayKubeconfig: filepath.Join(gw, "kubeconfig"), c.AdminKubeconfig: filepath.Join(*dir, "admin.kubeconfig")} {
		if err := os.Link(src, dst); err != nil {
			return err
		}
	}
	fmt.Printf("egdemo: kube-apiserver %s ready in %v (etcd and apiserver in netns %s)\n", c.Server, time.Since(started).Round(100*time.Millisecond), *netns)
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}

// runNodes prints the cluster's Nodes as `kubectl get nodes -o wide` does, after waiting, if
// asked, for one to be Ready.
func runNodes(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nodes", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig (required)")
	wait := fs.String("wait", "", "wait until this Node is Ready")
	timeout := fs.Duration("timeout", time.Minute, "longest wait")
	_ = fs.Parse(args)
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if *wait != "" {
		if err := cluster.WaitNodeReady(ctx, client, *wait, *timeout); err != nil {
			return err
		}
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tROLES\tEDGEGATE\tINTERNAL-IP\tOS-IMAGE\tKERNEL-VERSION\tTAINTS")
	for _, n := range nodes.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, cluster.NodeStatus(&n), roles(&n), n.Annotations["edgegate.dev/version"],
			address(&n, v1.NodeInternalIP), n.Status.NodeInfo.OSImage, n.Status.NodeInfo.KernelVersion, taints(&n))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *wait != "" {
		var l *coordinationv1.Lease
		if l, err = client.CoordinationV1().Leases("kube-node-lease").Get(ctx, *wait, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("lease of %s: %w", *wait, err)
		}
		fmt.Printf("\nLease kube-node-lease/%s: holder %s, renewed %s ago, duration %ds\n", l.Name, deref(l.Spec.HolderIdentity),
			time.Since(l.Spec.RenewTime.Time).Round(time.Second), derefInt(l.Spec.LeaseDurationSeconds))
	}
	return nil
}

func roles(n *v1.Node) string {
	var rs []string
	for k := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return "<none>"
	}
	return strings.Join(rs, ",")
}

func address(n *v1.Node, t v1.NodeAddressType) string {
	var as []string
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			as = append(as, a.Address)
		}
	}
	return strings.Join(as, ",")
}

func taints(n *v1.Node) string {
	var ts []string
	for _, t := range n.Spec.Taints {
		ts = append(ts, t.Key+":"+string(t.Effect))
	}
	return strings.Join(ts, ",")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}

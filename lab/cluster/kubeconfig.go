package cluster

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfigs writes admin.kubeconfig and gateway.kubeconfig into the cluster's
// directory, with the CA and the tokens inline so each file stands alone. The server address
// is the one inside NetNS: kubectl from outside needs `ip netns exec`.
func (c *Cluster) writeKubeconfigs(gatewayUser string) error {
	c.AdminKubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	c.GatewayKubeconfig = filepath.Join(c.Dir, "gateway.kubeconfig")
	for _, k := range []struct{ path, user, token string }{
		{c.AdminKubeconfig, "edgegate:admin", c.AdminToken},
		{c.GatewayKubeconfig, gatewayUser, c.GatewayToken},
	} {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["edgegate-test"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.CAPEM}
		cfg.AuthInfos[k.user] = &clientcmdapi.AuthInfo{Token: k.token}
		cfg.Contexts["edgegate-test"] = &clientcmdapi.Context{Cluster: "edgegate-test", AuthInfo: k.user}
		cfg.CurrentContext = "edgegate-test"
		if err := clientcmd.WriteToFile(*cfg, k.path); err != nil {
			return fmt.Errorf("write %s: %w", k.path, err)
		}
	}
	return nil
}

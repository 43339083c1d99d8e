// Package provision writes a gateway's identity and configuration (API server, bootstrap
// token, CA, config.yaml, network.yaml, the dashboard's certificate and token) into the data
// partition of its disk image, or of the disk the image was written to, without mounting
// anything: e2fsprogs' debugfs writes the files into the ext4 file system at the
// partition's offset, and reads them back. What it writes is checked first with the
// daemon's own parser (daemon/app.ParseConfig) and PID 1's (pid1.ParseIPConfig), so a
// gateway never boots into a configuration it refuses.
//
// On the gateway the files are in /var/lib/edgegate (the data partition's mount point):
// config.yaml names the others (tokenFile, caFile, dashboardTLS*, dashboardTokenFile), PID 1 passes it to the
// daemon and reads network.yaml itself.
package provision

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/app"
	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/pid1"
)

// Dir is where the data partition is mounted on the gateway.
const Dir = "/var/lib/edgegate"

// Identity is what makes a disk one gateway's.
type Identity struct {
	// APIServer is the cluster's https:// URL; with Token and CA the gateway joins it.
	// Empty: the gateway runs standalone on its image's manifests (or Config's).
	APIServer string
	// Token is the bearer (bootstrap) token.
	Token string
	// CA is the cluster CA's PEM certificate(s).
	CA []byte
	// Config is the operator's config.yaml (the daemon's --config keys), optional: the
	// cluster fields and the dashboard's certificate files are set in it.
	Config []byte
	// Network is network.yaml (ip: [eth0:192.0.2.10/24:192.0.2.1, eth1:dhcp]), optional.
	Network []byte
	// DashboardCert and DashboardKey are the dashboard's TLS certificate and key (PEM),
	// optional: without them the gateway makes a self-signed pair at its first start.
	DashboardCert, DashboardKey []byte
	// DashboardToken is the dashboard's access token, optional: without it the gateway
	// generates one at its first start and prints it once on its console.
	DashboardToken string
}

// File is one file for the data partition's root directory.
type File struct {
	Name string
	Data []byte
	Mode os.FileMode
}

// The files' names on the partition.
const (
	configName        = "config.yaml"
	networkName       = "network.yaml"
	tokenName         = "token"
	caName            = "ca.crt"
	dashboardCertName = "dashboard.crt"
	dashboardKeyName  = "dashboard.key"
	dashboardTokName  = "dashboard-token"
)

// Files checks id and returns the files to write, config.yaml last. An error names the
// field or file that is wrong.
func Files(id Identity) ([]File, error) {
	var files []File
	fields := map[string]string{}
	cluster := id.APIServer != "" || id.Token != "" || len(id.CA) > 0
	if cluster {
		if err := checkAPIServer(id.APIServer); err != nil {
			return nil, err
		}
		token := strings.TrimSpace(id.Token)
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return nil, errors.New("token: want one bearer token, without white space inside")
		}
		if err := checkCA(id.CA); err != nil {
			return nil, err
		}
		files = append(files, File{tokenName, []byte(token + "\n"), 0o600}, File{caName, id.CA, 0o644})
		fields["apiServer"] = id.APIServer
		fields["tokenFile"] = Dir + "/" + tokenName
		fields["caFile"] = Dir + "/" + caName
	}
	if (len(id.DashboardCert) > 0) != (len(id.DashboardKey) > 0) {
		return nil, errors.New("dashboard certificate and key: give both or neither")
	}
	if len(id.DashboardCert) > 0 {
		if _, err := tls.X509KeyPair(id.DashboardCert, id.DashboardKey); err != nil {
			return nil, fmt.Errorf("dashboard certificate and key: %w", err)
		}
		files = append(files, File{dashboardCertName, id.DashboardCert, 0o644}, File{dashboardKeyName, id.DashboardKey, 0o600})
		fields["dashboardTLSCertFile"] = Dir + "/" + dashboardCertName
		fields["dashboardTLSPrivateKeyFile"] = Dir + "/" + dashboardKeyName
	}
	if id.DashboardToken != "" {
		token := strings.TrimSpace(id.DashboardToken)
		if len(token) < dashboard.MinTokenLength || strings.ContainsAny(token, " \t\r\n") {
			return nil, fmt.Errorf("dashboard token: want one token of at least %d characters, without white space inside", dashboard.MinTokenLength)
		}
		files = append(files, File{dashboardTokName, []byte(token + "\n"), 0o600})
		fields["dashboardTokenFile"] = Dir + "/" + dashboardTokName
	}
	if len(id.Network) > 0 {
		if err := checkNetwork(id.Network); err != nil {
			return nil, err
		}
		files = append(files, File{networkName, id.Network, 0o644})
	}
	if len(id.Config) > 0 || len(fields) > 0 {
		config, err := mergeConfig(id.Config, fields)
		if err != nil {
			return nil, err
		}
		files = append(files, File{configName, config, 0o644})
	}
	if len(files) == 0 {
		return nil, errors.New("nothing to write: give the cluster's API server, token and CA, a config.yaml, a network.yaml, a dashboard certificate or token")
	}
	return files, nil
}

func checkAPIServer(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return fmt.Errorf("api server %q: want an https:// URL (the token must not cross the network in clear)", s)
	}
	return nil
}

// checkCA wants at least one certificate, and nothing but certificates.
func checkCA(pemData []byte) error {
	rest := bytes.TrimSpace(pemData)
	n := 0
	for len(rest) > 0 {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return errors.New("ca: not PEM")
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("ca: a PEM block of type %q, want CERTIFICATE", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("ca: certificate %d: %w", n+1, err)
		}
		n++
		rest = bytes.TrimSpace(rest)
	}
	if n == 0 {
		return errors.New("ca: no certificate")
	}
	return nil
}

// checkNetwork reads network.yaml as PID 1 does, but refuses what PID 1 would skip: a
// provisioned gateway must come up with every entry the operator wrote.
func checkNetwork(raw []byte) error {
	var nc struct {
		IP []string `json:"ip"`
	}
	if err := yaml.UnmarshalStrict(raw, &nc); err != nil {
		return fmt.Errorf("network.yaml: %w", err)
	}
	if len(nc.IP) == 0 {
		return errors.New("network.yaml: ip: no entries")
	}
	for _, s := range nc.IP {
		if _, err := pid1.ParseIPConfig(s); err != nil {
			return fmt.Errorf("network.yaml: ip entry %q: %w", s, err)
		}
	}
	return nil
}

// mergeConfig sets fields in the operator's config.yaml and checks the result with the
// daemon's own parser. A field the operator set to another value is an error, not a
// silent override.
func mergeConfig(raw []byte, fields map[string]string) ([]byte, error) {
	doc := map[string]any{}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("config.yaml: %w", err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	for k, v := range fields {
		if old, ok := doc[k]; ok && old != v {
			return nil, fmt.Errorf("config.yaml: %s is %v there, but provisioning sets it to %s: remove it from the file", k, old, v)
		}
		doc[k] = v
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("config.yaml: %w", err)
	}
	dir, err := os.MkdirTemp("", "provision-config")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, configName)
	if err := os.WriteFile(file, out, 0o600); err != nil {
		return nil, err
	}
	if _, err := app.ParseConfig([]string{"--config", file}); err != nil {
		// Named as the operator knows it, not by the temporary copy.
		return nil, fmt.Errorf("config.yaml: the daemon refuses it: %s", strings.ReplaceAll(err.Error(), "--config "+file+": ", ""))
	}
	return out, nil
}

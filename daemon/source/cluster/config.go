package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client defaults, kube-proxy's: a proxy reads a few resources and writes almost nothing.
const (
	DefaultQPS   = 5
	DefaultBurst = 10
)

// ErrNotConfigured says that neither a kubeconfig nor an API server was given: the gateway
// runs standalone.
var ErrNotConfigured = errors.New("no cluster configured (--kubeconfig or --api-server)")

// Config says how to reach the API server: a kubeconfig file, or the API server's URL with
// a bearer token (a bootstrap token on the persistent partition) and the cluster's CA.
type Config struct {
	// Kubeconfig is a kubeconfig file; APIServer, when also set, overrides its server.
	Kubeconfig string
	// APIServer is the API server's URL (https://host:6443).
	APIServer string
	// TokenFile holds the bearer token, re-read when it changes so a rotated token is used
	// without a restart. Only without Kubeconfig.
	TokenFile string
	// CAFile is the PEM bundle the API server's certificate must chain to; empty means the
	// system's roots, which a gateway image does not have. Only without Kubeconfig.
	CAFile string
	// QPS and Burst limit the client's request rate; zero means the defaults.
	QPS   float32
	Burst int
	// UserAgent names the client in the API server's logs and audit; empty means "edgegate".
	UserAgent string
}

// Enabled reports whether a cluster is configured at all.
func (c Config) Enabled() bool { return c.Kubeconfig != "" || c.APIServer != "" }

// RESTConfig builds the client configuration. It checks what can be checked before the first
// request (the token file is readable and not empty, the URL is https), so that a bad flag is
// reported at start rather than as an endless series of failed watches.
func (c Config) RESTConfig() (*rest.Config, error) {
	var rc *rest.Config
	switch {
	case c.Kubeconfig != "":
		if c.TokenFile != "" || c.CAFile != "" {
			return nil, errors.New("--token-file and --ca-file cannot be combined with --kubeconfig (put them in the kubeconfig)")
		}
		var err error
		rc, err = clientcmd.BuildConfigFromFlags(c.APIServer, c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
		}
	case c.APIServer != "":
		u, err := url.Parse(c.APIServer)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("--api-server %q: want an https:// URL", c.APIServer)
		}
		if c.TokenFile == "" {
			return nil, errors.New("--api-server needs --token-file (or use --kubeconfig)")
		}
		tok, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		if strings.TrimSpace(string(tok)) == "" {
			return nil, fmt.Errorf("--token-file %s is empty", c.TokenFile)
		}
		if c.CAFile != "" {
			if _, err := os.Stat(c.CAFile); err != nil {
				return nil, fmt.Errorf("--ca-file: %w", err)
			}
		}
		rc = &rest.Config{
			Host:            c.APIServer,
			BearerTokenFile: c.TokenFile,
			TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile},
		}
	default:
		return nil, ErrNotConfigured
	}
	rc.QPS, rc.Burst = c.QPS, c.Burst
	if rc.QPS == 0 {
		rc.QPS = DefaultQPS
	}
	if rc.Burst == 0 {
		rc.Burst = DefaultBurst
	}
	rc.UserAgent = c.UserAgent
	if rc.UserAgent == "" {
		rc.UserAgent = "edgegate"
	}
	// Protobuf is what kube-proxy speaks: smaller and cheaper to decode than JSON on a
	// small board, for the same objects.
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return rc, nil
}

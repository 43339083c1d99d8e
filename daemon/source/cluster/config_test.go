package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRESTConfigFromToken(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "abcdef.0123456789abcdef\n")
	ca := writeFile(t, dir, "ca.crt", "-----BEGIN CERTIFICATE-----\n")
	rc, err := Config{APIServer: "https://10.0.0.1:6443", TokenFile: token, CAFile: ca, QPS: 20}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.0.0.1:6443" || rc.BearerTokenFile != token || rc.CAFile != ca {
		t.Errorf("host %q token file %q CA %q", rc.Host, rc.BearerTokenFile, rc.CAFile)
	}
	if rc.QPS != 20 || rc.Burst != DefaultBurst || rc.UserAgent != "edgegate" {
		t.Errorf("QPS %v burst %d user agent %q; want 20, the default burst, edgegate", rc.QPS, rc.Burst, rc.UserAgent)
	}
	if !strings.HasPrefix(rc.ContentType, "application/vnd.kubernetes.protobuf") {
		t.Errorf("content type %q, want protobuf", rc.ContentType)
	}
}

func TestRESTConfigFromKubeconfig(t *testing.T) {
	kc := writeFile(t, t.TempDir(), "kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://k8s.example:6443", insecure-skip-tls-verify: false}
users:
- name: u
  user: {token: "abcdef.0123456789abcdef"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
	rc, err := Config{Kubeconfig: kc, UserAgent: "edgegate/1.2"}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://k8s.example:6443" || rc.BearerToken != "abcdef.0123456789abcdef" || rc.UserAgent != "edgegate/1.2" {
		t.Errorf("host %q token %q user agent %q", rc.Host, rc.BearerToken, rc.UserAgent)
	}
	if rc.QPS != DefaultQPS {
		t.Errorf("QPS %v, want the default", rc.QPS)
	}
	rc, err = Config{Kubeconfig: kc, APIServer: "https://10.0.0.9:6443"}.RESTConfig()
	if err != nil || rc.Host != "https://10.0.0.9:6443" {
		t.Errorf("--api-server overrides the kubeconfig's server: %v %v", rc, err)
	}
}

func TestRESTConfigErrors(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "abcdef.0123456789abcdef")
	empty := writeFile(t, dir, "empty", "\n")
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"http":               {Config{APIServer: "http://10.0.0.1:8080", TokenFile: token}, "https://"},
		"no token":           {Config{APIServer: "https://10.0.0.1:6443"}, "--token-file"},
		"empty token":        {Config{APIServer: "https://10.0.0.1:6443", TokenFile: empty}, "is empty"},
		"missing token":      {Config{APIServer: "https://10.0.0.1:6443", TokenFile: filepath.Join(dir, "nope")}, "no such file"},
		"missing CA":         {Config{APIServer: "https://10.0.0.1:6443", TokenFile: token, CAFile: filepath.Join(dir, "nope")}, "--ca-file"},
		"kubeconfig+token":   {Config{Kubeconfig: filepath.Join(dir, "kc"), TokenFile: token}, "cannot be combined"},
		"missing kubeconfig": {Config{Kubeconfig: filepath.Join(dir, "kc")}, "kubeconfig"},
	}
	for name, c := range cases {
		if _, err := c.cfg.RESTConfig(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
	if _, err := (Config{}).RESTConfig(); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("empty config: %v, want ErrNotConfigured", err)
	}
	if (Config{}).Enabled() || !(Config{APIServer: "https://x"}).Enabled() {
		t.Error("Enabled is wrong")
	}
}

// writeFile writes data to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

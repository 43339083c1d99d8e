package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The apiserver's serving certificate also carries the names a client inside a cluster uses,
// and the first address of the service range (the "kubernetes" Service's ClusterIP).
var servingDNSNames = []string{
	"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

var firstServiceIP = netip.MustParseAddr("10.96.0.1")

// certValidity is long enough for any test or demo and short enough to never be mistaken for
// a real cluster's certificate.
const certValidity = 7 * 24 * time.Hour

// pki is what the cluster's processes and clients are given: paths for the apiserver's flags
// and the CA in PEM for kubeconfigs.
type pki struct {
	caPEM      []byte
	caFile     string
	certFile   string // serving certificate
	keyFile    string
	saPubFile  string // verifies service-account tokens
	saKeyFile  string // signs them
	tokensFile string // static bearer tokens
}

// writePKI generates a CA, a serving certificate for ips (and the usual in-cluster names), a
// service-account key pair and the token file into dir.
func writePKI(dir string, ips []netip.Addr, tokens []tokenEntry) (*pki, error) {
	p := &pki{
		caFile:     filepath.Join(dir, "ca.crt"),
		certFile:   filepath.Join(dir, "apiserver.crt"),
		keyFile:    filepath.Join(dir, "apiserver.key"),
		saPubFile:  filepath.Join(dir, "sa.pub"),
		saKeyFile:  filepath.Join(dir, "sa.key"),
		tokensFile: filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()
	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "edgegate-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caCert, caDER, err := sign(caTmpl, caTmpl, caKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	servingKey, err := newKey()
	if err != nil {
		return nil, err
	}
	servingTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    servingDNSNames,
	}
	for _, ip := range append([]netip.Addr{firstServiceIP}, ips...) {
		servingTmpl.IPAddresses = append(servingTmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	_, servingDER, err := sign(servingTmpl, caCert, servingKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("service-account public key: %w", err)
	}

	files := []struct {
		path string
		data []byte
	}{
		{p.caFile, p.caPEM},
		{p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER})},
		{p.keyFile, keyPEM(servingKey)},
		{p.saKeyFile, keyPEM(saKey)},
		{p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})},
		{p.tokensFile, tokenFile(tokens)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, der, nil
}

// keyPEM cannot fail for a P-256 key this package generated.
func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(fmt.Sprintf("marshal P-256 key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// tokenEntry is one line of kube-apiserver's --token-auth-file.
type tokenEntry struct {
	token  string
	user   string
	groups []string
}

// tokenFile renders entries as token,user,uid,"group1,group2"; the user name doubles as uid.
func tokenFile(entries []tokenEntry) []byte {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", e.token, e.user, e.user, strings.Join(e.groups, ","))
	}
	return []byte(b.String())
}

// bootstrapStyleToken returns a token shaped like a kubeadm bootstrap token
// ([a-z0-9]{6}.[a-z0-9]{16}), so that the gateway's token handling sees the format operators
// give it. rand.Text's base32 letters, lowercased, stay inside that alphabet.
func bootstrapStyleToken() string {
	t := strings.ToLower(rand.Text())
	return t[:6] + "." + t[6:22]
}

package dashboard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The generated certificate's files in the state directory.
const (
	CertFileName = "dashboard-tls.crt"
	KeyFileName  = "dashboard-tls.key"
)

// Cert is the dashboard's TLS certificate with the fingerprints an operator pins.
type Cert struct {
	tls.Certificate
	// SHA256 is the SHA-256 of the certificate (DER), colon-separated hex as openssl
	// x509 -fingerprint -sha256 prints it.
	SHA256 string
	// SPKISHA256 is the base64 SHA-256 of the public key (SubjectPublicKeyInfo): what
	// Chromium's --ignore-certificate-errors-spki-list and curl's --pinnedpubkey take.
	SPKISHA256 string
	// CertFile and KeyFile are where it was read from or written to.
	CertFile, KeyFile string
	// Generated: this start made the key and certificate; Replaced: it replaced files it
	// could not read (why in Problem).
	Generated, Replaced bool
	Problem             error
}

// CertRequest says where the certificate comes from: the operator's files when both are
// set, else the pair generated once in StateDir (for Names and IPs) and reused after.
type CertRequest struct {
	CertFile, KeyFile string
	StateDir          string
	Names             []string
	IPs               []netip.Addr
}

// LoadCert returns the dashboard's certificate. The operator's files must load; a
// generated pair that no longer loads is generated anew (its fingerprint changes, which
// Cert.Replaced says so that the caller tells the operator).
func LoadCert(r CertRequest) (Cert, error) {
	if r.CertFile != "" || r.KeyFile != "" {
		if r.CertFile == "" || r.KeyFile == "" {
			return Cert{}, errors.New("--dashboard-tls-cert-file and --dashboard-tls-private-key-file: set both or neither")
		}
		return loadPair(r.CertFile, r.KeyFile)
	}
	if r.StateDir == "" {
		return Cert{}, errors.New("--dashboard-tls-cert-file: not set, and no --state-dir to keep a generated certificate in")
	}
	certFile, keyFile := filepath.Join(r.StateDir, CertFileName), filepath.Join(r.StateDir, KeyFileName)
	c, err := loadPair(certFile, keyFile)
	if err == nil {
		return c, nil
	}
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	replaced := !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist)
	if err := generatePair(r, certFile, keyFile); err != nil {
		return Cert{}, err
	}
	c, lerr := loadPair(certFile, keyFile)
	if lerr != nil {
		return Cert{}, lerr
	}
	c.Generated = true
	if replaced {
		c.Replaced, c.Problem = true, err
	}
	return c, nil
}

func loadPair(certFile, keyFile string) (Cert, error) {
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return Cert{}, fmt.Errorf("dashboard certificate %s: %w", certFile, err)
	}
	sum, spki, err := Fingerprints(kp.Certificate[0])
	if err != nil {
		return Cert{}, fmt.Errorf("dashboard certificate %s: %w", certFile, err)
	}
	return Cert{Certificate: kp, SHA256: sum, SPKISHA256: spki, CertFile: certFile, KeyFile: keyFile}, nil
}

// Fingerprints returns a certificate's SHA-256 (colon hex) and its public key's SHA-256
// (base64).
func Fingerprints(der []byte) (certSHA256, spkiSHA256 string, err error) {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(der)
	hex := make([]string, len(sum))
	for i, b := range sum {
		hex[i] = fmt.Sprintf("%02X", b)
	}
	spki := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return strings.Join(hex, ":"), base64.StdEncoding.EncodeToString(spki[:]), nil
}

// generatePair writes a new ECDSA P-256 key and self-signed certificate, both 0600.
// Gateways may boot without a trustworthy clock, so the validity does not hang on it: from
// 2000 to 2100 (operators pin the key, no CA vouches for it).
func generatePair(r CertRequest, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	cn := "edgegate dashboard"
	if len(r.Names) > 0 {
		cn = r.Names[0] + " dashboard"
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"edgegate"}},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     append([]string{"localhost"}, r.Names...),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, a := range r.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	// The key first: a certificate on disk always has its key beside it.
	if err := writeSecret(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	return writeSecret(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// writeSecret replaces path with b, 0600, through a rename so that a crash leaves the old
// file or the new one, never half of one.
func writeSecret(path string, b []byte) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("dashboard certificate: %w", err)
	}
	_, werr := f.Write(b)
	if serr := f.Sync(); werr == nil {
		werr = serr
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("dashboard certificate %s: %w", path, werr)
	}
	return nil
}

// TLSConfig is the dashboard's TLS: 1.2 at least (1.3 preferred, which Go negotiates
// first), forward-secret AEAD suites only for 1.2, HTTP/1.1 (the websocket upgrade needs it).
func TLSConfig(c Cert) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.Certificate},
		MinVersion:   tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos: []string{"http/1.1"},
	}
}

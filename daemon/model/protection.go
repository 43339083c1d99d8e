package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ProtectionAnnotation on a Service protects its external frontends (LoadBalancer IPs,
// external IPs and node ports; never the ClusterIP) in the kernel. Its value is a YAML or
// JSON mapping with the fields of Protection, e.g.
//
//	edgegate.dev/protection: "{synProxy: true, maxConnsPerSource: 64, newConnsPerSecond: 20}"
const ProtectionAnnotation = "edgegate.dev/protection"

// Protection is what guards one Service's exposed addresses. Limits are per service port
// and per source: an IPv4 address, or an IPv6 /64 (one host's usual share of addresses).
type Protection struct {
	// SynProxy answers the TCP handshake of new connections in the kernel with SYN cookies
	// (nftables synproxy), and opens the connection to the backend only once the client
	// has completed it: spoofed SYNs cost no conntrack entry and never reach a backend.
	SynProxy bool `json:"synProxy,omitempty"`
	// SynProxyMSS and SynProxyWindowScale are the TCP options the proxy offers clients on
	// the backends' behalf: they must match what the backends would offer (the proxy does
	// not rewrite windows). 0 means the defaults: MSS 1460 (IPv4) or 1440 (IPv6), and
	// window scale 7, Linux's with its default buffer sizes.
	SynProxyMSS         uint16 `json:"synProxyMSS,omitempty"`
	SynProxyWindowScale *uint8 `json:"synProxyWindowScale,omitempty"`
	// MaxConnsPerSource caps the connections one source holds to the port at once
	// (nftables ct count); 0 means no cap.
	MaxConnsPerSource uint32 `json:"maxConnsPerSource,omitempty"`
	// NewConnsPerSecond limits how fast one source opens connections to the port, with
	// bursts up to NewConnsBurst (default: one second's worth); 0 means no limit.
	NewConnsPerSecond uint32 `json:"newConnsPerSecond,omitempty"`
	NewConnsBurst     uint32 `json:"newConnsBurst,omitempty"`
}

// Defaults of the SYN proxy's options.
const (
	DefaultSynProxyMSS4        = 1460
	DefaultSynProxyMSS6        = 1440
	DefaultSynProxyWindowScale = 7
)

// MSS is the MSS the SYN proxy offers in family f.
func (p *Protection) MSS(f Family) uint16 {
	switch {
	case p.SynProxyMSS != 0:
		return p.SynProxyMSS
	case f == IPv6:
		return DefaultSynProxyMSS6
	}
	return DefaultSynProxyMSS4
}

// WindowScale is the window scale the SYN proxy offers.
func (p *Protection) WindowScale() uint8 {
	if p.SynProxyWindowScale != nil {
		return *p.SynProxyWindowScale
	}
	return DefaultSynProxyWindowScale
}

// Burst is the burst of the new-connection rate limit.
func (p *Protection) Burst() uint32 {
	if p.NewConnsBurst != 0 {
		return p.NewConnsBurst
	}
	return p.NewConnsPerSecond
}

// Limits are the bounds the fields must stay within.
const (
	minMSS, maxMSS = 536, 65495 // RFC 879's default, the largest a 65535-byte loopback MTU gives
	maxWindowScale = 14         // RFC 7323
	maxPerSource   = 1 << 24    // a cap above this is no cap: say 0
)

// ParseProtection reads a Protection written as a YAML or JSON mapping (the annotation's
// value, a pool's protection field). Unknown fields are errors, so a misspelt limit is
// never silently dropped. Every error names the field.
func ParseProtection(data []byte) (*Protection, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	var p Protection
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("more than one document")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks every field; the error names each bad one.
func (p *Protection) Validate() error {
	var errs []string
	if !p.SynProxy && (p.SynProxyMSS != 0 || p.SynProxyWindowScale != nil) {
		errs = append(errs, "synProxyMSS and synProxyWindowScale: only with synProxy: true")
	}
	if m := p.SynProxyMSS; m != 0 && (m < minMSS || m > maxMSS) {
		errs = append(errs, fmt.Sprintf("synProxyMSS: %d is not between %d and %d", m, minMSS, maxMSS))
	}
	if w := p.SynProxyWindowScale; w != nil && *w > maxWindowScale {
		errs = append(errs, fmt.Sprintf("synProxyWindowScale: %d is above %d", *w, maxWindowScale))
	}
	if p.MaxConnsPerSource > maxPerSource {
		errs = append(errs, fmt.Sprintf("maxConnsPerSource: %d is above %d (0 means no cap)", p.MaxConnsPerSource, maxPerSource))
	}
	if p.NewConnsPerSecond > maxPerSource {
		errs = append(errs, fmt.Sprintf("newConnsPerSecond: %d is above %d (0 means no limit)", p.NewConnsPerSecond, maxPerSource))
	}
	if p.NewConnsBurst != 0 && p.NewConnsPerSecond == 0 {
		errs = append(errs, "newConnsBurst: only with newConnsPerSecond")
	}
	if p.NewConnsBurst > maxPerSource {
		errs = append(errs, fmt.Sprintf("newConnsBurst: %d is above %d", p.NewConnsBurst, maxPerSource))
	}
	if len(errs) == 0 && !p.Any() {
		errs = append(errs, "sets nothing: give synProxy, maxConnsPerSource or newConnsPerSecond")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Any reports whether p protects anything.
func (p *Protection) Any() bool {
	return p != nil && (p.SynProxy || p.MaxConnsPerSource != 0 || p.NewConnsPerSecond != 0)
}

// Limits reports whether p has per-source limits (a cap or a rate).
func (p *Protection) Limits() bool {
	return p != nil && (p.MaxConnsPerSource != 0 || p.NewConnsPerSecond != 0)
}

// String is the protection in the annotation's syntax, its fields in a fixed order.
func (p *Protection) String() string {
	if p == nil {
		return ""
	}
	var f []string
	if p.SynProxy {
		f = append(f, "synProxy: true")
		if p.SynProxyMSS != 0 {
			f = append(f, fmt.Sprintf("synProxyMSS: %d", p.SynProxyMSS))
		}
		if p.SynProxyWindowScale != nil {
			f = append(f, fmt.Sprintf("synProxyWindowScale: %d", *p.SynProxyWindowScale))
		}
	}
	if p.MaxConnsPerSource != 0 {
		f = append(f, fmt.Sprintf("maxConnsPerSource: %d", p.MaxConnsPerSource))
	}
	if p.NewConnsPerSecond != 0 {
		f = append(f, fmt.Sprintf("newConnsPerSecond: %d", p.NewConnsPerSecond))
		if p.NewConnsBurst != 0 {
			f = append(f, fmt.Sprintf("newConnsBurst: %d", p.NewConnsBurst))
		}
	}
	return "{" + strings.Join(f, ", ") + "}"
}

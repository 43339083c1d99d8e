package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/update"
)

// runUpdate drives the gateway's update API (the dashboard's /api/update) at -url, the demo's
// forwarder on the host's loopback, over TLS pinned to the key the gateway's console printed.
// With -bundle it uploads a signed bundle and prints the gateway's answer: it has verified
// the bundle and written it into its other slot, and reboots into a trial of it. Without,
// it prints the slots and the update history, retrying for up to -wait while the dashboard
// does not answer (the gateway may be rebooting).
func runUpdate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("update", flag.ExitOnError)
	url := fs.String("url", "", "the dashboard, https://127.0.0.1:PORT (required)")
	tokenFile := fs.String("token-file", "", "file holding the dashboard's access token (required)")
	spki := fs.String("spki", "", "base64 SHA-256 of the gateway's public key, as its console printed it (required)")
	bundleFile := fs.String("bundle", "", "upload this bundle")
	wait := fs.Duration("wait", 0, "without -bundle: keep asking for this long while the dashboard does not answer")
	_ = fs.Parse(args)
	if *url == "" || *tokenFile == "" || *spki == "" {
		return errors.New("update: -url, -token-file and -spki are required")
	}
	raw, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	api := updateAPI{url: strings.TrimSuffix(*url, "/") + "/api/update", token: strings.TrimSpace(string(raw)), client: pinnedClient(*spki)}
	if *bundleFile != "" {
		return api.upload(ctx, *bundleFile)
	}
	deadline := time.Now().Add(*wait)
	for {
		st, err := api.status(ctx)
		if err == nil {
			printStatus(st)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("update: %w", err)
		}
		time.Sleep(time.Second)
	}
}

// pinnedClient speaks TLS to a gateway whose public key hashes to spki: no CA vouches for a
// gateway's own certificate, its key is what binds the connection to it.
func pinnedClient(spki string) *http.Client {
	return &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(certs [][]byte, _ [][]*x509.Certificate) error {
			if len(certs) == 0 {
				return errors.New("no certificate")
			}
			_, got, err := dashboard.Fingerprints(certs[0])
			if err != nil {
				return err
			}
			if got != spki {
				return fmt.Errorf("the gateway's key is %s, not the pinned %s", got, spki)
			}
			return nil
		},
	}}}
}

type updateAPI struct {
	url, token string
	client     *http.Client
}

func (a updateAPI) do(ctx context.Context, method string, body io.Reader, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s %s: %s: %q", method, a.url, resp.Status, b)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, a.url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

func (a updateAPI) upload(ctx context.Context, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	defer f.Close()
	var answer struct {
		Attempt *update.Attempt `json:"attempt"`
		Error   string          `json:"error"`
	}
	if err := a.do(ctx, http.MethodPost, f, &answer); err != nil {
		return fmt.Errorf("update: upload %s: %w", file, err)
	}
	if at := answer.Attempt; at != nil {
		fmt.Printf("  %s: %s (slot %s) -> %s (slot %s), %d bytes verified and written; the gateway reboots into a trial\n",
			at.Phase, at.From.Version, at.From.Slot, at.To.Version, at.To.Slot, at.Bytes)
	}
	return nil
}

func (a updateAPI) status(ctx context.Context) (update.Status, error) {
	var st update.Status
	err := a.do(ctx, http.MethodGet, nil, &st)
	return st, err
}

// printStatus prints the running firmware, both slots as the boot loader sees them and the
// update history, newest first.
func printStatus(st update.Status) {
	fmt.Printf("  running %s from slot %s (board %s)\n", st.Version, st.Slot, st.Board)
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  SLOT\tFIRMWARE\tSTATE\tENTRY\tBOOTS NEXT")
	for _, s := range st.Slots {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%v\n", s.Slot, orDash(s.Firmware), s.State, orDash(s.Entry), s.BootsNext)
	}
	_ = w.Flush()
	fmt.Println("  update history:")
	w = tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "    STARTED\tFROM\tTO\tPHASE\tTRIAL BOOTS\tTOOK\tSOURCE")
	for _, a := range st.History {
		fmt.Fprintf(w, "    %s\t%s (%s)\t%s (%s)\t%s\t%d\t%v\t%s\n", a.Started.UTC().Format(time.RFC3339), a.From.Version, a.From.Slot,
			a.To.Version, a.To.Slot, a.Phase, a.TrialBoots, a.Duration(time.Now()).Round(time.Second), a.Source)
		if a.Reason != "" {
			fmt.Fprintf(w, "    \t\t\t%s\t\t\t\n", a.Reason)
		}
	}
	_ = w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

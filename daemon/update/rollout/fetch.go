package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
)

// How a download is retried: a network error, a 5xx answer or a stream cut short is tried
// again, anything else fails at once (every gateway would get the same 404).
const (
	downloadTries   = 3
	downloadBackoff = 2 * time.Second
)

// errTooLarge: the bundle exceeds MaxBundleSize.
var errTooLarge = errors.New("bundle too large")

// fetch downloads r's bundle straight into the updater's inactive slot, the whole stream's
// sha256 computed on the way, and returns the staged attempt. The update is staged only
// when the digest is spec.sha256 and the bundle holds spec.version; otherwise it is
// cancelled. Errors name the rollout and the field.
func (c *Controller) fetch(ctx context.Context, r *FirmwareRollout) (update.Attempt, error) {
	for try := 1; ; try++ {
		a, transient, err := c.fetchOnce(ctx, r)
		if err == nil || !transient || try == downloadTries || ctx.Err() != nil {
			return a, err
		}
		c.Log.Warn("bundle download failed; trying again", "rollout", r.Name, "try", try, "err", err)
		if !sleep(ctx, time.Duration(try)*downloadBackoff) {
			return a, ctx.Err()
		}
	}
}

// fetchOnce is one download; transient says whether trying again may help.
func (c *Controller) fetchOnce(ctx context.Context, r *FirmwareRollout) (a update.Attempt, transient bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.DownloadTimeout)
	defer cancel()
	url := r.Spec.BundleURL
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return a, false, fmt.Errorf("FirmwareRollout %s: spec.bundleURL: %w", r.Name, err)
	}
	resp, err := c.HTTPClient.Do(req)
	if err != nil {
		return a, true, fmt.Errorf("FirmwareRollout %s: spec.bundleURL: %w", r.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		retry := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
		return a, retry, fmt.Errorf("FirmwareRollout %s: spec.bundleURL: GET %s: %s", r.Name, url, resp.Status)
	}
	if resp.ContentLength > c.MaxBundleSize {
		return a, false, fmt.Errorf("FirmwareRollout %s: spec.bundleURL: GET %s: %d bytes: %w (at most %d)", r.Name, url, resp.ContentLength, errTooLarge, c.MaxBundleSize)
	}
	body := &stream{r: resp.Body, h: sha256.New(), limit: c.MaxBundleSize}
	a, err = c.Updater.Install(ctx, body, update.Request{Source: source(r.Name), Force: r.Spec.Force})
	if err != nil {
		if body.err != nil {
			// The updater saw the download break off; its refusal says nothing of the
			// bundle.
			return a, !errors.Is(body.err, errTooLarge), fmt.Errorf("FirmwareRollout %s: spec.bundleURL: GET %s: after %d bytes: %w", r.Name, url, body.n, body.err)
		}
		return a, false, fmt.Errorf("FirmwareRollout %s: the updater did not install the bundle from %s: %w", r.Name, url, err)
	}
	// The digest covers the whole file; the updater may stop reading at its archive's end.
	if _, err := io.Copy(io.Discard, body); err != nil {
		c.cancel(r, "the rest of the download failed")
		return a, !errors.Is(err, errTooLarge), fmt.Errorf("FirmwareRollout %s: spec.bundleURL: GET %s: after %d bytes: %w", r.Name, url, body.n, err)
	}
	if sum := hex.EncodeToString(body.h.Sum(nil)); sum != r.Spec.SHA256 {
		c.cancel(r, "sha256 mismatch")
		return a, false, fmt.Errorf("FirmwareRollout %s: spec.sha256: the bundle from %s (%d bytes) has sha256 %s, not %s", r.Name, url, body.n, sum, r.Spec.SHA256)
	}
	if a.To.Version != r.Spec.Version {
		c.cancel(r, "version mismatch")
		return a, false, fmt.Errorf("FirmwareRollout %s: spec.version: %s, but the bundle from %s holds %s", r.Name, r.Spec.Version, url, a.To.Version)
	}
	return a, false, nil
}

// cancel discards the update this rollout staged, and nothing else: the updater's Cancel
// takes whatever is staged, an operator's upload too.
func (c *Controller) cancel(r *FirmwareRollout, why string) {
	p := c.Updater.Status().Pending
	if p == nil || p.Phase != update.PhaseStaged || p.Source != source(r.Name) {
		return
	}
	if _, err := c.Updater.Cancel(source(r.Name) + ": " + why); err != nil && !errors.Is(err, update.ErrNothingStaged) {
		c.Log.Error("cancelling the staged update failed", "rollout", r.Name, "err", err)
	}
}

// stream is the download as the updater reads it: hashed, counted, bounded, and its first
// error kept, so that a download that broke off is told from a bundle the updater refused.
type stream struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	limit int64
	err   error
}

func (s *stream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	if s.n > s.limit {
		err = fmt.Errorf("%w (more than %d bytes)", errTooLarge, s.limit)
	}
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
)

// callWait bounds the calls that PID 1 answers at once; a PID 1 that does not answer in
// that time must not hold the daemon's sync loop.
const callWait = 5 * time.Second

// Client is the daemon's side of the channel. It is also the dashboard's and the rollout
// controller's updater (update.Updater).
type Client struct {
	http *http.Client
	log  *slog.Logger

	watchOnce sync.Once
	mu        sync.Mutex
	onChange  []func()
}

// Dial returns a client of the socket at path. Nothing connects until the first call.
func Dial(path string, log *slog.Logger) *Client {
	var d net.Dialer
	return &Client{log: log, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:          4,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: 0, // the updater's answers take as long as a bundle upload
	}}}
}

// FromEnv returns the client of the socket PID 1 named in SocketEnv, and false when the
// process was not started by PID 1.
func FromEnv(log *slog.Logger) (*Client, bool) {
	path := os.Getenv(SocketEnv)
	if path == "" {
		return nil, false
	}
	return Dial(path, log), true
}

// Ready tells PID 1 a sync succeeded.
func (c *Client) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callWait)
	defer cancel()
	return c.call(ctx, http.MethodPost, "/v1/ready", nil, nil)
}

// Report sends a report and returns what PID 1 knows of the daemon's runs.
func (c *Client) Report(ctx context.Context, r Report) (Child, error) {
	ctx, cancel := context.WithTimeout(ctx, callWait)
	defer cancel()
	var ch Child
	err := c.call(ctx, http.MethodPost, "/v1/report", bytes.NewReader(encode(r)), &ch)
	return ch, err
}

// Status returns the updater's status; when PID 1 does not answer, a status that says so.
func (c *Client) Status() update.Status {
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	var a statusAnswer
	if err := c.call(ctx, http.MethodGet, "/v1/update", nil, &a); err != nil {
		return update.Status{Problem: "PID 1's updater does not answer: " + err.Error()}
	}
	return a.Status
}

// Install streams a bundle to PID 1's updater. An error of r (an upload too slow or too
// large) is returned as r gave it, so the caller can tell it from the updater's.
func (c *Client) Install(ctx context.Context, r io.Reader, req update.Request) (update.Attempt, error) {
	q := url.Values{"source": {req.Source}}
	if req.Force {
		q.Set("force", "1")
	}
	if req.Activate {
		q.Set("activate", "1")
	}
	body := &recordingReader{r: r}
	a, err := c.updateCall(ctx, "/v1/update/install?"+q.Encode(), body)
	if body.err != nil {
		return a, body.err
	}
	return a, err
}

// Activate switches to the staged slot and reboots.
func (c *Client) Activate() (update.Attempt, error) {
	return c.updateCall(context.Background(), "/v1/update/activate", nil)
}

// Cancel drops the staged update.
func (c *Client) Cancel(source string) (update.Attempt, error) {
	return c.updateCall(context.Background(), "/v1/update/cancel?"+url.Values{"source": {source}}.Encode(), nil)
}

// OnChange calls fn after each change of the updater's status, from a goroutine that long
// polls PID 1 for as long as the process lives.
func (c *Client) OnChange(fn func()) {
	c.mu.Lock()
	c.onChange = append(c.onChange, fn)
	c.mu.Unlock()
	c.watchOnce.Do(func() { go c.watch() })
}

func (c *Client) watch() {
	var seen uint64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), maxStatusWait+callWait)
		var a statusAnswer
		err := c.call(ctx, http.MethodGet, "/v1/update?after="+strconv.FormatUint(seen, 10)+"&wait="+maxStatusWait.String(), nil, &a)
		cancel()
		if err != nil {
			c.log.Debug("waiting for the updater's changes failed", "err", err)
			time.Sleep(callWait)
			continue
		}
		if a.Version == seen {
			continue
		}
		seen = a.Version
		c.mu.Lock()
		fns := append([]func(){}, c.onChange...)
		c.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
	}
}

func (c *Client) updateCall(ctx context.Context, path string, body io.Reader) (update.Attempt, error) {
	var a updateAnswer
	if err := c.call(ctx, http.MethodPost, path, body, &a); err != nil {
		return update.Attempt{}, fmt.Errorf("PID 1's updater: %w", err)
	}
	if a.Error != "" {
		return a.Attempt, &UpdateError{Msg: a.Error, Kind: a.Kind}
	}
	return a.Attempt, nil
}

// call makes one request; out, when not nil, receives the JSON answer.
func (c *Client) call(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://pid1"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

// recordingReader keeps the first error of r other than io.EOF.
type recordingReader struct {
	r   io.Reader
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && r.err == nil {
		r.err = err
	}
	return n, err
}

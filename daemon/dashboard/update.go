package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/update"
)

// KeyUpdate is the hub key of the firmware updater's status.
const KeyUpdate = "update"

// ServeUpdates offers the firmware update actions and shows the updater's status.
func (d *Dashboard) ServeUpdates(u update.Updater) {
	d.mu.Lock()
	d.updater = u
	d.mu.Unlock()
	u.OnChange(func() { _ = d.hub.Set(KeyUpdate, u.Status()) })
	_ = d.hub.Set(KeyUpdate, u.Status())
}

func (d *Dashboard) updates(w http.ResponseWriter) (update.Updater, bool) {
	d.mu.Lock()
	u := d.updater
	d.mu.Unlock()
	if u == nil {
		http.Error(w, "firmware updates are only offered by the firmware (edgegate as PID 1)", http.StatusNotFound)
		return nil, false
	}
	return u, true
}

// serveUpdateStatus answers GET /api/update.
func (d *Dashboard) serveUpdateStatus(w http.ResponseWriter, _ *http.Request) {
	if u, ok := d.updates(w); ok {
		writeJSON(w, http.StatusOK, u.Status())
	}
}

// bundleUpload bounds a firmware upload: a bundle is a kernel and an initramfs, tens of
// megabytes, at most the 1 GiB a fleet rollout downloads (rollout.DefaultMaxBundleSize). It
// may take as long as the link needs, but a link that cannot bring 64 KiB in 30s (17 kbit/s)
// is cut off rather than left holding the updater.
var bundleUpload = listener.Upload{Max: 1 << 30, MinBytes: 64 << 10, Window: 30 * time.Second}

// serveUpdate is POST /api/update: the request body is a signed bundle, bounded by
// Options.Upload. It is verified while it streams into the inactive slot; activate=0 leaves it staged, otherwise the
// gateway switches to it and reboots right after answering. force=1 installs a bundle that
// is not newer than the running firmware (never one that fails verification).
func (d *Dashboard) serveUpdate(w http.ResponseWriter, r *http.Request) {
	u, ok := d.updates(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	req := update.Request{Source: "upload from " + r.RemoteAddr, Force: q.Get("force") == "1", Activate: q.Get("activate") != "0"}
	d.opts.Log.Warn("operator action", "action", "update", "force", req.Force, "activate", req.Activate,
		"bytes", r.ContentLength, "from", r.RemoteAddr, "userAgent", r.UserAgent())
	a, err := u.Install(r.Context(), d.opts.Upload.Body(w, r), req)
	d.answerUpdate(w, a, err)
}

// serveActivate is POST /api/update/activate: switch to the staged update and reboot.
func (d *Dashboard) serveActivate(w http.ResponseWriter, r *http.Request) {
	if u, ok := d.updates(w); ok {
		d.opts.Log.Warn("operator action", "action", "activate update", "from", r.RemoteAddr, "userAgent", r.UserAgent())
		a, err := u.Activate()
		d.answerUpdate(w, a, err)
	}
}

// serveCancel is POST /api/update/cancel: discard the staged update.
func (d *Dashboard) serveCancel(w http.ResponseWriter, r *http.Request) {
	if u, ok := d.updates(w); ok {
		d.opts.Log.Warn("operator action", "action", "cancel update", "from", r.RemoteAddr, "userAgent", r.UserAgent())
		a, err := u.Cancel("operator at " + r.RemoteAddr)
		d.answerUpdate(w, a, err)
	}
}

// updateAnswer is what the update actions answer: the attempt, and the error if any.
type updateAnswer struct {
	Attempt *update.Attempt `json:"attempt,omitempty"`
	Error   string          `json:"error,omitempty"`
}

func (d *Dashboard) answerUpdate(w http.ResponseWriter, a update.Attempt, err error) {
	ans := updateAnswer{Error: errString(err)}
	if a.ID != "" {
		ans.Attempt = &a
	}
	code := http.StatusOK
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
	case errors.As(err, &tooBig):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, listener.ErrTooSlow):
		code = http.StatusRequestTimeout
	case errors.Is(err, update.ErrRefused):
		code = http.StatusUnprocessableEntity
	case errors.Is(err, update.ErrBusy), errors.Is(err, update.ErrNothingStaged):
		code = http.StatusConflict
	case errors.Is(err, update.ErrUnavailable):
		code = http.StatusServiceUnavailable
	default:
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, ans)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

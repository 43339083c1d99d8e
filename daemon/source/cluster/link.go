package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Link is the state of the gateway's link to the API server, for health, metrics and the
// dashboard.
type Link struct {
	// Reachable says the API server answered the most recent request (even with an error
	// status); false until it first answers.
	Reachable bool `json:"reachable"`
	// Synced says every informer has listed its resource at least once.
	Synced bool `json:"synced"`
	// WatchesHealthy says every informer holds an open watch.
	WatchesHealthy bool `json:"watchesHealthy"`
	// LastSuccess is when a list or watch request last succeeded.
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	// LastError is the most recent list or watch failure, and when it happened; a later
	// success does not clear it.
	LastError   string    `json:"lastError,omitzero"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// FromCache says the Services and EndpointSlices in effect came from the cache file
	// because the API server did not answer in time; CacheSince is when that began and
	// CacheSavedAt when the cache had been written.
	FromCache    bool      `json:"fromCache"`
	CacheSince   time.Time `json:"cacheSince,omitzero"`
	CacheSavedAt time.Time `json:"cacheSavedAt,omitzero"`
	// CacheWritten is when this run last wrote the cache file, and CacheError why the last
	// write failed (empty after a success).
	CacheWritten time.Time `json:"cacheWritten,omitzero"`
	CacheError   string    `json:"cacheError,omitzero"`
}

// linkState follows the outcome of every list and watch request of the informers.
type linkState struct {
	now func() time.Time
	log *slog.Logger

	mu          sync.Mutex
	watching    map[string]bool   // resource -> holds an open watch
	lastErrText map[string]string // resource -> last error logged, to log repeats quietly
	lastReqErr  map[string]error  // resource -> error of its last request
	reachable   bool
	lastSuccess time.Time
	lastErr     error
	lastErrAt   time.Time
}

func newLinkState(now func() time.Time, log *slog.Logger) *linkState {
	return &linkState{now: now, log: log, watching: map[string]bool{}, lastErrText: map[string]string{}, lastReqErr: map[string]error{}}
}

// answered reports whether an error came from the API server rather than from the way to
// it: a status (forbidden, expired, too many requests) means the server is there.
func answered(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st)
}

// listed records the outcome of a list request.
func (l *linkState) listed(resource string, err error) {
	l.record(resource, "list", err, false)
}

// watchStarted records the outcome of a watch request.
func (l *linkState) watchStarted(resource string, err error) {
	l.record(resource, "watch", err, err == nil)
}

// watchEnded records a list and watch cycle that ended with err, as the informer's watch
// error handler reports it. A failed request ends its cycle with its own error wrapped,
// which was recorded when the request returned.
func (l *linkState) watchEnded(resource string, err error) {
	l.mu.Lock()
	seen := l.lastReqErr[resource] != nil && errors.Is(err, l.lastReqErr[resource])
	l.mu.Unlock()
	if seen {
		return
	}
	l.record(resource, "watch", err, false)
}

func (l *linkState) record(resource, verb string, err error, watching bool) {
	if errors.Is(err, context.Canceled) {
		return // shutting down
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastReqErr[resource] = err
	if verb == "watch" {
		l.watching[resource] = watching
	}
	wasReachable := l.reachable
	if err == nil {
		l.lastSuccess = now
		l.reachable = true
		delete(l.lastErrText, resource)
		if !wasReachable {
			l.log.Info("the API server answers", "resource", resource, "request", verb)
		}
		return
	}
	l.lastErr, l.lastErrAt = err, now
	l.reachable = answered(err)
	switch {
	case !l.reachable && wasReachable:
		l.log.Warn("lost the API server; the last synced state stays in effect", "resource", resource, "request", verb, "err", err)
	case l.lastErrText[resource] != errorKey(err):
		// The reflector retries with backoff; a new error is news, the same again is not.
		l.log.Warn("list/watch failed", "resource", resource, "request", verb, "err", err)
	default:
		l.log.Debug("list/watch failed again", "resource", resource, "request", verb, "err", err)
	}
	l.lastErrText[resource] = errorKey(err)
}

// errorKey is what tells one failure from another: the URL of a failed request carries a
// random watch timeout, so only the error under it counts.
func errorKey(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// state fills the request-level fields of a Link; resources are the informers' names, all
// of which must hold a watch for the watches to count as healthy.
func (l *linkState) state(resources []string) Link {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk := Link{Reachable: l.reachable, WatchesHealthy: true, LastSuccess: l.lastSuccess, LastErrorAt: l.lastErrAt}
	if l.lastErr != nil {
		lk.LastError = l.lastErr.Error()
	}
	for _, r := range resources {
		if !l.watching[r] {
			lk.WatchesHealthy = false
		}
	}
	return lk
}

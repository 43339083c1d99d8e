package cache

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// DefaultSettle lets a burst of changes (a rollout touching many EndpointSlices) end
	// before the state is written.
	DefaultSettle = 2 * time.Second
	// DefaultMinInterval spaces writes on a busy cluster: the cache is a fallback for a
	// reboot without the API, not a journal, and the persistent partition is flash.
	DefaultMinInterval = 30 * time.Second
	// DefaultFirstSettle delays the first write: the sources' first sync asks for it just as
	// the proxy programs its first full sync, and at 10,000 Services encoding the state took
	// half a second of CPU in the middle of that sync (of two cores).
	DefaultFirstSettle = 10 * time.Second
)

// Writer saves the state a snapshot function returns, some time after it was told the state
// changed: changes within Settle are written together, writes are at least MinInterval
// apart, and a state equal to the one last written is not written again.
type Writer struct {
	file *File
	// snapshot returns the state to save, or false while there is nothing worth saving
	// (the sources have not synced).
	snapshot func() (State, bool)
	log      *slog.Logger
	now      func() time.Time

	// Settle, MinInterval and FirstSettle (Settle for the first write) may be changed
	// before Run.
	Settle, MinInterval, FirstSettle time.Duration

	trigger chan struct{}

	mu       sync.Mutex
	lastSum  [sha256.Size]byte // the fingerprint of the state last written
	lastSave time.Time
	lastErr  error
}

// NewWriter returns a Writer of file. A nil log discards.
func NewWriter(file *File, snapshot func() (State, bool), log *slog.Logger) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{
		file: file, snapshot: snapshot, log: log, now: time.Now,
		Settle: DefaultSettle, MinInterval: DefaultMinInterval, FirstSettle: DefaultFirstSettle,
		trigger: make(chan struct{}, 1),
	}
}

// Trigger says the state changed. It never blocks.
func (w *Writer) Trigger() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// LastSave returns when the state was last written and the error of the last attempt.
func (w *Writer) LastSave() (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastSave, w.lastErr
}

// Run writes after triggers until ctx ends, then writes a pending change once more so that
// a clean shutdown keeps the newest state.
func (w *Writer) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			if pending {
				w.save()
			}
			return
		case <-w.trigger:
			if pending {
				continue
			}
			pending = true
			w.mu.Lock()
			next, settle := w.lastSave.Add(w.MinInterval), w.Settle
			if w.lastSave.IsZero() {
				settle = max(settle, w.FirstSettle)
			}
			w.mu.Unlock()
			timer.Reset(max(settle, next.Sub(w.now())))
		case <-timer.C:
			pending = false
			if !w.save() {
				// Retry a failed write after the usual spacing; a full disk may clear.
				pending = true
				timer.Reset(max(w.Settle, w.MinInterval))
			}
		}
	}
}

// save writes the current state if it differs from the last one written. It reports false
// only when a write failed.
func (w *Writer) save() bool {
	st, ok := w.snapshot()
	if !ok {
		return true
	}
	sum, err := fingerprint(st)
	if err == nil {
		w.mu.Lock()
		same := !w.lastSave.IsZero() && sum == w.lastSum
		w.mu.Unlock()
		if same {
			return true
		}
		st.SavedAt = w.now()
		err = w.file.Save(st)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
	if err != nil {
		w.log.Warn("saving the cluster state cache failed; the previous one stays", "file", w.file.Path(), "err", err)
		return false
	}
	w.lastSum = sum
	w.lastSave = st.SavedAt
	w.log.Debug("saved the cluster state cache", "file", w.file.Path(), "services", len(st.Services),
		"endpointslices", len(st.EndpointSlices), "nodes", len(st.Nodes))
	return true
}

// fingerprint identifies a state without encoding all of it: the API server gives a Service
// or EndpointSlice a new resourceVersion whenever it stores it again, so its identity and
// version stand for its content. Nodes (whose version moves with every heartbeat and is not
// kept) and objects without a version count by their encoding.
func fingerprint(st State) ([sha256.Size]byte, error) {
	h := sha256.New()
	e := newObjectEncoder(h)
	meta := func(kind string, m *metav1.ObjectMeta, obj any) {
		e.raw(kind + "\x00")
		if m == nil || m.ResourceVersion == "" {
			e.object(obj)
			return
		}
		e.raw(m.Namespace + "\x00" + m.Name + "\x00" + string(m.UID) + "\x00" + m.ResourceVersion + "\n")
	}
	for _, s := range st.Services {
		meta("Service", metaOf(s), s)
	}
	for _, s := range st.EndpointSlices {
		meta("EndpointSlice", metaOf(s), s)
	}
	for _, n := range st.Nodes {
		meta("Node", nil, n)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, e.err
}

func metaOf[T any, P interface {
	*T
	GetObjectMeta() metav1.Object
}](o P) *metav1.ObjectMeta {
	if o == nil {
		return nil
	}
	m, _ := o.GetObjectMeta().(*metav1.ObjectMeta)
	return m
}

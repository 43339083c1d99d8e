package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// shutdownTimeout bounds the last status post on the way down.
const shutdownTimeout = 5 * time.Second

// Retry delays after a failed heartbeat: kubelet's lease controller retries from 200 ms up
// to 7 s, well inside a 40 s lease.
const (
	minRetry = 200 * time.Millisecond
	maxRetry = 7 * time.Second
)

// Status is the membership's state for health, metrics and the dashboard.
type Status struct {
	// Registered says the Node object exists and carries the gateway's labels and taint.
	Registered bool `json:"registered"`
	// Ready, Reason and Message are the Ready condition as last posted.
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitzero"`
	Message string `json:"message,omitzero"`
	// LastLeaseRenew and LastStatusPost are when those last succeeded.
	LastLeaseRenew time.Time `json:"lastLeaseRenew,omitzero"`
	LastStatusPost time.Time `json:"lastStatusPost,omitzero"`
	// LastError is the most recent failure, empty after a fully successful heartbeat.
	LastError string `json:"lastError,omitzero"`
}

// Member keeps the gateway's Node and Lease. Its methods are safe for concurrent use.
type Member struct {
	client     kubernetes.Interface
	cfg        Config
	programmed func() bool
	log        *slog.Logger
	now        func() time.Time
	wake       chan struct{}

	mu         sync.Mutex
	draining   bool
	registered bool
	uid        types.UID
	lease      *coordinationv1.Lease // as last written; nil means read it again
	status     Status
}

// NewMember returns a Member for the Node cfg describes. programmed reports whether the
// proxy has programmed its rules, which is what Ready means for a gateway. A nil log
// discards.
func NewMember(client kubernetes.Interface, cfg Config, programmed func() bool, log *slog.Logger) *Member {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.defaults()
	if cfg.KernelVersion == "" {
		cfg.KernelVersion = kernelRelease()
	}
	return &Member{client: client, cfg: cfg, programmed: programmed, log: log, now: time.Now, wake: make(chan struct{}, 1)}
}

// kernelRelease is uname -r, or "" when it cannot be had.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// SetDraining marks the Node not ready while the gateway drains (or ready again), at once.
func (m *Member) SetDraining(draining bool) {
	m.mu.Lock()
	m.draining = draining
	m.mu.Unlock()
	m.Trigger()
}

// Trigger says readiness may have changed (the proxy programmed its rules); the status is
// posted if it did. It never blocks.
func (m *Member) Trigger() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Status returns the membership's state.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.status
	st.Registered = m.registered
	return st
}

// Run registers the Node, then renews the Lease every RenewInterval and posts the status
// when readiness changes or StatusInterval has passed, until ctx ends; then it posts the
// Node not ready, since a gateway that stopped forwards nothing.
func (m *Member) Run(ctx context.Context) {
	defer m.shutdown()
	tick := time.NewTicker(m.cfg.RenewInterval)
	defer tick.Stop()
	retryIn := minRetry
	var retryC <-chan time.Time
	failing := false
	// report logs the first failure of a series and the recovery; the failures between go
	// to Debug, as an outage would otherwise log every few seconds.
	report := func(what string, err error) {
		if ctx.Err() != nil {
			return // stopping: the request was cancelled, not refused
		}
		m.setError(err)
		switch {
		case err != nil && !failing:
			m.log.Warn(what+" failed; retrying", "node", m.cfg.Name, "err", err)
		case err != nil:
			m.log.Debug(what+" failed again", "node", m.cfg.Name, "retryIn", retryIn, "err", err)
		case failing:
			m.log.Info("node heartbeat works again", "node", m.cfg.Name)
		}
		failing = err != nil
	}
	heartbeat := func() {
		err := m.heartbeat(ctx)
		report("node heartbeat", err)
		if err != nil {
			retryC = time.After(retryIn)
			retryIn = min(2*retryIn, maxRetry)
			return
		}
		retryIn, retryC = minRetry, nil
	}
	heartbeat()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			heartbeat()
		case <-retryC:
			heartbeat()
		case <-m.wake:
			if m.isRegistered() {
				if err := m.syncStatus(ctx); err != nil {
					report("posting the node status", err)
				}
			}
		}
	}
}

func (m *Member) isRegistered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered
}

func (m *Member) setError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.LastError = ""
	if err != nil {
		m.status.LastError = err.Error()
	}
}

// heartbeat registers if needed, renews the Lease and posts the status if due.
func (m *Member) heartbeat(ctx context.Context) error {
	if !m.isRegistered() {
		if err := m.register(ctx); err != nil {
			return err
		}
	}
	return errors.Join(m.renewLease(ctx), m.syncStatus(ctx))
}

// register creates the Node, or puts the gateway's labels, annotation and taint on the one
// that exists (a reboot, or a Node created by an operator in advance).
func (m *Member) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewInterval)
	defer cancel()
	nodes := m.client.CoreV1().Nodes()
	n := newNode(m.cfg)
	setStatus(&n.Status, m.cfg, false, ReasonNotProgrammed, "edgegate is starting", m.now())
	created, err := nodes.Create(ctx, n, metav1.CreateOptions{})
	switch {
	case err == nil:
		m.registeredAs(created.UID)
		m.log.Info("registered the node", "node", m.cfg.Name)
		m.event(ctx, v1.EventTypeNormal, "RegisteredNode", "Node "+m.cfg.Name+" registered by edgegate "+m.cfg.Version)
		return nil
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("register node %s: %w", m.cfg.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, m.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if reconcileNode(cur, m.cfg) {
			if cur, err = nodes.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return err
			}
			m.log.Info("updated the existing node's labels, annotation and taint", "node", m.cfg.Name)
		}
		m.registeredAs(cur.UID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("register existing node %s: %w", m.cfg.Name, err)
	}
	return nil
}

func (m *Member) registeredAs(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.registered, m.uid = true, uid
	m.lease = nil // read the Lease again, for its owner reference
}

// readiness says what the Ready condition should be.
func (m *Member) readiness() (ready bool, reason, message string) {
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
	switch {
	case draining:
		return false, ReasonDraining, "edgegate is draining: load balancers should steer away"
	case !m.programmed():
		return false, ReasonNotProgrammed, "edgegate has not programmed the proxy rules yet"
	default:
		return true, ReasonReady, "edgegate is forwarding"
	}
}

// syncStatus posts the status when it differs from the Node's (readiness changed, or the
// node lifecycle controller marked the Node Unknown during an outage) or StatusInterval has
// passed since the last heartbeat in it. Like the kubelet it reads the Node every time, from
// the API server's cache, which also notices a deleted Node.
func (m *Member) syncStatus(ctx context.Context) error {
	ready, reason, msg := m.readiness()
	return m.postStatus(ctx, ready, reason, msg)
}

func (m *Member) postStatus(ctx context.Context, ready bool, reason, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewInterval)
	defer cancel()
	nodes := m.client.CoreV1().Nodes()
	fromCache := true
	var before v1.ConditionStatus
	posted := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		opts := metav1.GetOptions{}
		if fromCache {
			// Served from the API server's watch cache; a conflict reads etcd's version.
			opts.ResourceVersion = "0"
			fromCache = false
		}
		n, err := nodes.Get(ctx, m.cfg.Name, opts)
		if err != nil {
			return err
		}
		now := m.now()
		if !statusDue(n.Status, m.cfg, ready, reason, msg, now) {
			return nil
		}
		before = readyStatus(n.Status)
		setStatus(&n.Status, m.cfg, ready, reason, msg, now)
		if _, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		posted = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		// Someone deleted the Node: register it again on the next heartbeat.
		m.mu.Lock()
		m.registered = false
		m.mu.Unlock()
		return fmt.Errorf("node %s was deleted; registering it again: %w", m.cfg.Name, err)
	}
	if err != nil {
		return fmt.Errorf("post node %s status: %w", m.cfg.Name, err)
	}
	m.mu.Lock()
	m.status.Ready, m.status.Reason, m.status.Message = ready, reason, msg
	if posted {
		m.status.LastStatusPost = m.now()
	}
	m.mu.Unlock()
	want := v1.ConditionFalse
	if ready {
		want = v1.ConditionTrue
	}
	if posted && before != want {
		m.log.Info("node status", "node", m.cfg.Name, "ready", ready, "reason", reason, "was", string(before))
		typ, evReason := v1.EventTypeNormal, "NodeReady"
		if !ready {
			typ, evReason = v1.EventTypeWarning, "NodeNotReady"
		}
		m.event(ctx, typ, evReason, msg)
	}
	return nil
}

// shutdown posts the Node not ready on the way down, with a deadline of its own: Run's
// context has ended by then.
func (m *Member) shutdown() {
	if !m.isRegistered() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := m.postStatus(ctx, false, ReasonShutdown, "edgegate is shutting down"); err != nil {
		m.log.Warn("could not mark the node not ready on shutdown", "node", m.cfg.Name, "err", err)
	}
}

// event records a Kubernetes Event about the Node; events are a courtesy to whoever runs
// kubectl describe node, so a failure is only logged.
func (m *Member) event(ctx context.Context, typ, reason, msg string) {
	now := metav1.NewTime(m.now())
	ev := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", m.cfg.Name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		// kubectl describe node finds a Node's events by a UID equal to its name, the
		// kubelet's convention.
		InvolvedObject: v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: m.cfg.Name, UID: types.UID(m.cfg.Name)},
		Reason:         reason, Message: msg, Type: typ,
		Source:         v1.EventSource{Component: "edgegate", Host: m.cfg.Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "edgegate.dev/edgegate", ReportingInstance: m.cfg.Name,
	}
	if _, err := m.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		m.log.Debug("recording an event failed", "reason", reason, "err", err)
	}
}

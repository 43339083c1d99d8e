package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/daemon/model"
)

// Rejections reports the objects the gateway's model.Admission did not take as they are:
// in the log and as a Warning Event on the object, so that `kubectl describe` tells its
// owner why the gateway treats it as it does. Report never blocks (the admission calls it
// under the source's lock): Events wait in a bounded queue that Run drains, and are dropped
// with a log line when the queue is full. The log line is always written.
type Rejections struct {
	client   kubernetes.Interface
	identity string
	log      *slog.Logger
	now      func() time.Time
	queue    chan model.Rejection
}

// rejectionQueue bounds the Events waiting to be created: a flood of bad objects costs
// memory for this many, never more.
const rejectionQueue = 256

// NewRejections returns a Rejections that creates its Events through client, signed by
// identity (the gateway's node name). A nil client only logs.
func NewRejections(client kubernetes.Interface, identity string, log *slog.Logger) *Rejections {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Rejections{client: client, identity: identity, log: log, now: time.Now, queue: make(chan model.Rejection, rejectionQueue)}
}

// Event reasons on rejected objects.
const (
	ReasonRejected      = "InvalidObjectRejected"
	ReasonRefused       = "InvalidServiceRefused"
	ReasonSourcesClosed = "SourceRangesClosed"
	ReasonSliceSkipped  = "InvalidEndpointSliceSkipped"
)

// Report logs r and queues its Event.
func (r *Rejections) Report(rej model.Rejection) {
	reason, what := describe(rej)
	r.log.Warn(what, "kind", rej.Kind(), "object", rej.Object(), "outcome", string(rej.Outcome), "errors", errorsText(rej.Errs))
	if r.client == nil {
		return
	}
	select {
	case r.queue <- rej:
	default:
		r.log.Warn("too many rejected objects at once; this one gets no Event", "kind", rej.Kind(), "object", rej.Object(), "reason", reason)
	}
}

// Run creates the queued Events until ctx ends.
func (r *Rejections) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rej := <-r.queue:
			r.create(ctx, rej)
		}
	}
}

// describe returns the Event reason and a sentence for the operator.
func describe(rej model.Rejection) (reason, what string) {
	switch rej.Outcome {
	case model.KeptLastGood:
		return ReasonRejected, "invalid object rejected; its last good version stays in effect"
	case model.Refused:
		return ReasonRefused, "invalid Service with no good version: its addresses refuse all traffic until it is fixed"
	case model.SourcesClosed:
		return ReasonSourcesClosed, "loadBalancerSourceRanges cannot be understood: the LoadBalancer IPs refuse every source until it is fixed"
	default:
		return ReasonSliceSkipped, "invalid EndpointSlice with no good version: it adds no endpoints"
	}
}

// errorsText joins the field errors, each naming its field.
func errorsText(errs field.ErrorList) string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return strings.Join(out, "; ")
}

func (r *Rejections) create(ctx context.Context, rej model.Rejection) {
	reason, what := describe(rej)
	ref := v1.ObjectReference{Kind: rej.Kind()}
	var meta metav1.ObjectMeta
	if rej.Service != nil {
		ref.APIVersion, meta = "v1", rej.Service.ObjectMeta
	} else {
		ref.APIVersion, meta = "discovery.k8s.io/v1", rej.Slice.ObjectMeta
	}
	ref.Namespace, ref.Name, ref.UID, ref.ResourceVersion = meta.Namespace, meta.Name, meta.UID, meta.ResourceVersion
	msg := what + ": " + errorsText(rej.Errs)
	if len(msg) > 1024 { // the API server refuses longer messages
		msg = msg[:1021] + "..."
	}
	now := metav1.NewTime(r.now())
	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", meta.Name, now.UnixNano()), Namespace: meta.Namespace},
		InvolvedObject: ref, Reason: reason, Message: msg, Type: v1.EventTypeWarning,
		Source:         v1.EventSource{Component: "edgegate", Host: r.identity},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "edgegate.dev/proxy", ReportingInstance: r.identity,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.client.CoreV1().Events(meta.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.log.Warn("recording an event failed", "kind", rej.Kind(), "object", rej.Object(), "reason", reason, "err", err)
	}
}

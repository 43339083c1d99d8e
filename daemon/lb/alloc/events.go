package alloc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Event reasons on a Service.
const (
	ReasonAllocated = "IPAllocated"
	ReasonFailed    = "AllocationFailed"
)

// Recorder records Events about Services.
type Recorder interface {
	Event(ctx context.Context, svc *v1.Service, eventType, reason, message string)
}

// EventRecorder creates core/v1 Events in the Service's namespace, one per call. It only
// creates: the controller records an Event when a Service's outcome changes, not per sync, so
// there is nothing to aggregate, and deploy/rbac.yaml grants the gateways no more than create
// on events.
type EventRecorder struct {
	Client   kubernetes.Interface
	Identity string           // the gateway (node name), as the Event's reporting instance
	Log      *slog.Logger     // nil discards
	Now      func() time.Time // nil means time.Now
}

var _ Recorder = (*EventRecorder)(nil)

// Event creates the Event; a failure is only logged, as Events are a courtesy to whoever
// runs kubectl describe.
func (r *EventRecorder) Event(ctx context.Context, svc *v1.Service, eventType, reason, message string) {
	clock, log := r.Now, r.Log
	if clock == nil {
		clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := metav1.NewTime(clock())
	ev := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", svc.Name, now.UnixNano()), Namespace: svc.Namespace},
		InvolvedObject: v1.ObjectReference{
			APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name,
			UID: svc.UID, ResourceVersion: svc.ResourceVersion,
		},
		Reason: reason, Message: message, Type: eventType,
		Source:         v1.EventSource{Component: component, Host: r.Identity},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: reportingController, ReportingInstance: r.Identity,
	}
	if _, err := r.Client.CoreV1().Events(svc.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Warn("recording an event failed", "service", svc.Namespace+"/"+svc.Name, "reason", reason, "err", err)
	}
}

// How the allocator signs its Events.
const (
	component           = "edgegate-lb-allocator"
	reportingController = "edgegate.dev/lb-allocator"
)

package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgegate/edgegate/daemon/model"
)

func TestRejectionsRecordAnEventOnTheObject(t *testing.T) {
	client := fake.NewClientset()
	r := NewRejections(client, "gw1", testLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", ResourceVersion: "7"}}
	r.Report(model.Rejection{Service: svc, Outcome: model.SourcesClosed,
		Errs: field.ErrorList{field.Invalid(field.NewPath("spec", "loadBalancerSourceRanges").Index(0), "10.0.0.0/33", "must be a CIDR")}})
	var evs *v1.EventList
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if evs, err = client.CoreV1().Events("shop").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d events, want 1", len(evs.Items))
	}
	ev := evs.Items[0]
	ref := ev.InvolvedObject
	if ev.Type != v1.EventTypeWarning || ev.Reason != ReasonSourcesClosed || ref.Kind != "Service" || ref.Name != "web" ||
		ref.UID != "u1" || ref.ResourceVersion != "7" || ev.ReportingInstance != "gw1" ||
		!strings.Contains(ev.Message, `spec.loadBalancerSourceRanges[0]: Invalid value: "10.0.0.0/33"`) {
		t.Errorf("event: %+v", ev)
	}
}

func TestRejectionsNeverBlock(t *testing.T) {
	r := NewRejections(fake.NewClientset(), "gw1", testLog(t))
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	// Nobody drains the queue: Report must still return, dropping what does not fit.
	for range 2 * rejectionQueue {
		r.Report(model.Rejection{Service: svc, Outcome: model.Refused})
	}
	if n := len(r.queue); n != rejectionQueue {
		t.Errorf("queue holds %d, want %d", n, rejectionQueue)
	}
}

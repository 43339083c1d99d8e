package rollout

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgegate/edgegate/firmware/bundle"
)

// The FirmwareRollout API (deploy/firmwarerollout-crd.yaml).
const (
	Group    = "edgegate.dev"
	Version  = "v1alpha1"
	Resource = "firmwarerollouts"
	Kind     = "FirmwareRollout"
)

// GVR names the FirmwareRollout resource for the dynamic client.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// What a gateway writes on its own Node.
const (
	// VersionAnnotation is the running firmware's version.
	VersionAnnotation = "edgegate.dev/firmware-version"
	// UpdateAnnotation is "<rollout>: <phase>" of the rollout this gateway last acted on.
	UpdateAnnotation = "edgegate.dev/firmware-update"
	// BoardLabel is the firmware's board: bundles are per board, so a fleet of several
	// boards is rolled out with one FirmwareRollout per board, selected by this label.
	BoardLabel = "edgegate.dev/board"
)

// Phase is a rollout's state.
type Phase string

// Rollout phases.
const (
	// PhaseProgressing: selected gateways are still to be updated (also a new rollout's
	// state before any gateway wrote it).
	PhaseProgressing Phase = "Progressing"
	// PhaseComplete: every selected gateway runs the version.
	PhaseComplete Phase = "Complete"
	// PhaseHalted: a gateway failed to update; no other gateway starts. Halted stays:
	// fix the cause, then delete the rollout and create it again.
	PhaseHalted Phase = "Halted"
)

// NodePhase is one gateway's state in a rollout.
type NodePhase string

// Gateway phases, in the order an update goes through them.
const (
	NodeWaiting     NodePhase = "Waiting"     // for a rollout slot, or stopped by a halt
	NodeDraining    NodePhase = "Draining"    // health checks fail, LoadBalancer IPs move to a peer
	NodeDownloading NodePhase = "Downloading" // the bundle streams into the inactive slot
	NodeInstalling  NodePhase = "Installing"  // staged and verified; about to switch
	NodeRebooting   NodePhase = "Rebooting"   // switched; rebooting, or on trial until healthy
	NodeUpdated     NodePhase = "Updated"     // runs the version, committed
	NodeFailed      NodePhase = "Failed"      // see the message
)

// updating reports whether a gateway in phase p is out of service for the rollout: the
// phases maxUnavailable counts.
func (p NodePhase) updating() bool {
	switch p {
	case NodeDraining, NodeDownloading, NodeInstalling, NodeRebooting:
		return true
	}
	return false
}

// FirmwareRollout is the custom resource.
type FirmwareRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitzero"`
}

// Spec is what the operator asks for.
type Spec struct {
	// Version is the firmware version every selected gateway should run.
	Version string `json:"version"`
	// BundleURL is where the signed bundle is (http or https).
	BundleURL string `json:"bundleURL"`
	// SHA256 is the hex digest of the whole bundle file.
	SHA256 string `json:"sha256"`
	// NodeSelector selects gateways by their Node's labels; empty selects every gateway.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// MaxUnavailable is how many gateways may update at once; 0 means 1.
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// Force installs a bundle that is not newer than the running firmware (a downgrade),
	// never one below the gateway's security epoch floor: that gateway fails, with the
	// updater's reason, and halts the rollout.
	Force bool `json:"force,omitempty"`
}

// Status is what the gateways report. Each gateway writes only its own entry of Nodes
// (a JSON merge patch of status.nodes.<node>), so their writes never conflict; the summary
// fields are written with the resourceVersion they were computed from.
type Status struct {
	Phase   Phase  `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the spec generation the summary was computed for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// The counts: selected gateways, and how many of them are updated, updating or failed.
	SelectedNodes int `json:"selectedNodes"`
	UpdatedNodes  int `json:"updatedNodes"`
	UpdatingNodes int `json:"updatingNodes"`
	FailedNodes   int `json:"failedNodes"`
	// Nodes is each gateway's state, by Node name.
	Nodes map[string]NodeStatus `json:"nodes,omitempty"`
}

// NodeStatus is one gateway's entry. Every field is always written (no omitempty): a merge
// patch leaves a field it does not name as it was, and a stale message would mislead.
type NodeStatus struct {
	Phase NodePhase `json:"phase"`
	// From is the version the gateway ran when it started; To the rollout's version then.
	From string `json:"from"`
	To   string `json:"to"`
	// Message says what the gateway waits for, or why it failed.
	Message string `json:"message"`
	// Attempt is the updater's attempt ID (its history's key), set once the bundle is
	// staged: after the reboot it tells this rollout's attempt from any other.
	Attempt string `json:"attempt"`
	// Updated is when the entry last changed.
	Updated metav1.Time `json:"updated"`
}

// Limits of a spec; deploy/firmwarerollout-crd.yaml says the same in its schema.
const (
	maxURLLen = 2048
	// leaseNameMax is a Lease name's limit (a DNS subdomain).
	leaseNameMax = 253
)

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Decode converts the object the API server sent. A field of the wrong type is an error
// naming the rollout.
func Decode(u *unstructured.Unstructured) (*FirmwareRollout, error) {
	// Through JSON rather than the unstructured converter: encoding/json's errors name
	// the field ("Spec.spec.maxUnavailable").
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("FirmwareRollout %s: %w", u.GetName(), err)
	}
	var r FirmwareRollout
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("FirmwareRollout %s: %w", u.GetName(), err)
	}
	return &r, nil
}

// Validate checks the spec as the CRD's schema does, so that an object the schema did not
// check (an older CRD, a fake) is refused the same way; errors name the field.
func (r *FirmwareRollout) Validate() error {
	s := r.Spec
	field := func(name, format string, args ...any) error {
		return fmt.Errorf("FirmwareRollout %s: spec.%s: %s", r.Name, name, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Version == "":
		return field("version", "missing")
	case s.BundleURL == "":
		return field("bundleURL", "missing")
	case s.SHA256 == "":
		return field("sha256", "missing")
	case !sha256RE.MatchString(s.SHA256):
		return field("sha256", "%q is not 64 lowercase hex digits", s.SHA256)
	case s.MaxUnavailable < 0:
		return field("maxUnavailable", "%d is less than 1", s.MaxUnavailable)
	}
	if _, err := bundle.ParseVersion(s.Version); err != nil {
		return field("version", "%v", err)
	}
	if len(s.BundleURL) > maxURLLen {
		return field("bundleURL", "longer than %d characters", maxURLLen)
	}
	u, err := url.Parse(s.BundleURL)
	if err != nil {
		return field("bundleURL", "%v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return field("bundleURL", "%q is not an http or https URL", s.BundleURL)
	}
	if _, err := labels.ValidatedSelectorFromSet(s.NodeSelector); err != nil {
		return field("nodeSelector", "%v", err)
	}
	if n := len(leaseName(r.Name, r.maxUnavailable()-1)); n > leaseNameMax {
		return fmt.Errorf("FirmwareRollout %s: metadata.name: too long for its Lease names (%d characters, at most %d)", r.Name, n, leaseNameMax)
	}
	if errs := validation.IsDNS1123Subdomain(leaseName(r.Name, r.maxUnavailable()-1)); len(errs) > 0 {
		return fmt.Errorf("FirmwareRollout %s: metadata.name: not usable in a Lease name: %s", r.Name, strings.Join(errs, "; "))
	}
	return nil
}

// maxUnavailable is spec.maxUnavailable with its default.
func (r *FirmwareRollout) maxUnavailable() int { return max(r.Spec.MaxUnavailable, 1) }

// selects reports whether the rollout selects a Node with these labels.
func (r *FirmwareRollout) selects(nodeLabels map[string]string) bool {
	return labels.SelectorFromSet(r.Spec.NodeSelector).Matches(labels.Set(nodeLabels))
}

// source is the updater's Request.Source for this rollout.
func source(name string) string { return "rollout " + name }

// leaseName is the i-th slot Lease of a rollout.
func leaseName(rollout string, i int) string {
	return fmt.Sprintf("edgegate-rollout-%s-%d", rollout, i)
}

package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// auditLog is the apiserver's own record of every request the gateway's user made, with the
// authorizer's decision and the response code: the RBAC check reads what the server decided,
// not what a client chose to log. The log is appended to across restarts.
type auditLog struct {
	path   string // JSON lines
	policy string
}

func newAuditLog(t *testing.T, dir, user string) *auditLog {
	t.Helper()
	a := &auditLog{path: filepath.Join(dir, "audit.log"), policy: filepath.Join(dir, "audit-policy.yaml")}
	// Metadata carries the user, verb, resource, source IP, user agent, response code and
	// the authorizer's decision; the gateway's user only, everyone else not at all.
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [%q]
- level: None
`, user)
	if err := os.WriteFile(a.policy, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

// args are the apiserver flags that write the log.
func (a *auditLog) args() []string {
	return []string{"--audit-policy-file=" + a.policy, "--audit-log-path=" + a.path, "--audit-log-format=json", "--audit-log-mode=blocking"}
}

// auditEvent is the part of an audit.k8s.io/v1 Event the check reads.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	SourceIPs []string `json:"sourceIPs"`
	UserAgent string   `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

// kind is what RBAC authorizes: verb on group/resource[/subresource] in a namespace.
func (ev auditEvent) kind() string {
	if ev.ObjectRef == nil {
		return ev.Verb + " " + ev.RequestURI
	}
	r := ev.ObjectRef.Resource
	if ev.ObjectRef.APIGroup != "" {
		r = ev.ObjectRef.APIGroup + "/" + r
	}
	if ev.ObjectRef.Subresource != "" {
		r += "/" + ev.ObjectRef.Subresource
	}
	if ev.ObjectRef.Namespace != "" {
		r += " in " + ev.ObjectRef.Namespace
	}
	return ev.Verb + " " + r
}

func (ev auditEvent) code() int {
	if ev.ResponseStatus == nil {
		return 0
	}
	return ev.ResponseStatus.Code
}

// refused says the authorizer refused the request.
func (ev auditEvent) refused() bool {
	return ev.code() == 403 || ev.Annotations["authorization.k8s.io/decision"] == "forbid"
}

func (ev auditEvent) String() string {
	return fmt.Sprintf("%s %s (code %d, decision %q, %q, from %v, %s)", ev.kind(), ev.RequestURI, ev.code(),
		ev.Annotations["authorization.k8s.io/decision"], ev.Annotations["authorization.k8s.io/reason"], ev.SourceIPs, ev.UserAgent)
}

// events reads every event of the log.
func (a *auditLog) events(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(a.path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var evs []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log %s: %v: %s", a.path, err, sc.Text())
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("audit log %s: %v", a.path, err)
	}
	return evs
}

// daemonKinds are the kinds of request the daemon must have made by the end of the test: its
// informers, its registration and status, its Lease and its events. Were any missing, the
// check would not have seen the daemon at work and would prove nothing about it. The
// informers' initial lists arrive as watches (client-go's streaming lists), so no list is
// required; one the daemon makes is checked like any other request.
var daemonKinds = []string{
	"watch services", "watch discovery.k8s.io/endpointslices", "watch nodes",
	"create nodes", "get nodes", "update nodes/status",
	"update coordination.k8s.io/leases in kube-node-lease",
	"create events in default",
}

// checkGatewayRequests fails for every request the daemon made that the authorizer refused or
// that did not come over the lab network, and checks that the log does show the test's own
// refused request (made before deploy/rbac.yaml), so that an empty result means something.
func (a *auditLog) checkGatewayRequests(t *testing.T, user string) {
	t.Helper()
	var daemon, refused, offPath []auditEvent
	testRefused := 0
	seen := map[string]int{}
	for _, ev := range a.events(t) {
		if ev.User.Username != user {
			continue
		}
		if !strings.HasPrefix(ev.UserAgent, "edgegate/") {
			if ev.UserAgent == testUserAgent && ev.refused() {
				testRefused++
			}
			continue
		}
		daemon = append(daemon, ev)
		seen[ev.kind()]++
		if ev.refused() {
			refused = append(refused, ev)
		}
		if !slices.Equal(ev.SourceIPs, []string{gatewayUplink}) {
			offPath = append(offPath, ev)
		}
	}
	var kinds []string
	for k, n := range seen {
		kinds = append(kinds, fmt.Sprintf("%s ×%d", k, n))
	}
	slices.Sort(kinds)
	t.Logf("audit: %d requests (events) by the daemon as %s, none of which may be refused:\n  %s",
		len(daemon), user, strings.Join(kinds, "\n  "))
	if testRefused == 0 {
		t.Errorf("the audit log shows no refusal of the test's own request before deploy/rbac.yaml: it would not show the daemon's either")
	}
	for _, k := range daemonKinds {
		if seen[k] == 0 {
			t.Errorf("the audit log shows no %q by the daemon: the check did not see the daemon at work", k)
		}
	}
	for _, ev := range refused {
		t.Errorf("deploy/rbac.yaml refused a request of the daemon: %s", ev)
	}
	for i, ev := range offPath {
		if i == 5 {
			t.Errorf("... and %d more", len(offPath)-5)
			break
		}
		t.Errorf("a daemon request did not come from the gateway's uplink %s: %s", gatewayUplink, ev)
	}
}

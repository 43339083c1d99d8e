package labtest

import (
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/lab"
)

// brokenManifestsKeepServing: bad input loses nothing. A file that does not parse, a file
// with one invalid object among valid ones, and a good file edited into an invalid state:
// the daemon keeps running, logs every problem with its file, object and field, serves the
// valid objects, and keeps the last good version of the object that broke.
func brokenManifestsKeepServing() Scenario {
	kept := service("kept", []string{"10.96.10.20"})
	fine := service("fine", []string{"10.96.10.21"})
	broken := service("broken-port", []string{"10.96.10.22"})
	broken.Spec.Ports[0].Port = 0
	// RunMatrix writes the scenario's manifests as <Name>.yaml: keptFile is that file.
	const keptFile, mixedFile, garbageFile = "broken-manifests-keep-last-good-rules", "broken-manifests-mixed", "broken-manifests-garbage"
	return Scenario{
		Name:      keptFile,
		Manifests: manifests(kept, slice(kept, discovery.AddressTypeIPv4, ready(1, 2, 3))),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			expectOutcome(t, l.Client, "10.96.10.20:80", lab.Answered)

			g.Manifests.Write(t, garbageFile, "apiVersion: v1\nkind: Service\nmetadata: [this is not\n")
			g.Manifests.Write(t, mixedFile, manifests(fine, slice(fine, discovery.AddressTypeIPv4, ready(1)), broken))
			t.Cleanup(func() {
				g.Manifests.Remove(t, garbageFile)
				g.Manifests.Remove(t, mixedFile)
			})
			eventually(t, 10*time.Second, "the valid service next to an invalid one answers", func() (bool, string) {
				r := l.Client.Probe("10.96.10.21:80")
				return r.Outcome == lab.Answered, r.String()
			})
			expectLog(t, g.Daemon, mixedFile+".yaml", "matrix/broken-port", "spec.ports[0].port")
			expectLog(t, g.Daemon, garbageFile+".yaml", "manifest problem")
			if r := l.Client.Probe("10.96.10.22:80"); r.Outcome == lab.Answered {
				t.Errorf("the invalid service answers: %v", r)
			}

			// The good file is edited into an invalid state: its last good rules stay.
			bad := service("kept", []string{"10.96.10.20"})
			bad.Spec.Ports[0].Port = 70000
			g.Manifests.Write(t, keptFile, manifests(bad, slice(kept, discovery.AddressTypeIPv4, ready(1, 2, 3))))
			expectLog(t, g.Daemon, keptFile+".yaml", "matrix/kept", "spec.ports[0].port", "70000")
			if line, dup := g.Daemon.LogLine("defined more than once"); dup {
				t.Fatalf("the edit must replace the scenario's own file, not add a duplicate: %s", line)
			}
			for range 5 {
				expectOutcome(t, l.Client, "10.96.10.20:80", lab.Answered)
			}
		},
	}
}

// expectLog waits up to 10s for a daemon log line that contains every text.
func expectLog(t *testing.T, d *Daemon, texts ...string) {
	t.Helper()
	eventually(t, 10*time.Second, "a log line with "+describeTexts(texts), func() (bool, string) {
		_, ok := d.LogLine(texts...)
		return ok, "not logged yet"
	})
	line, _ := d.LogLine(texts...)
	t.Logf("logged: %s", line)
}

func describeTexts(texts []string) string {
	out := ""
	for i, s := range texts {
		if i > 0 {
			out += ", "
		}
		out += "\"" + s + "\""
	}
	return out
}

package member

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testGateway is a Group without sockets: heartbeats go from one to another as bytes
// (next, heard), which is all the replay protection looks at.
type testGateway struct {
	g        *Group
	logs     *bytes.Buffer
	rejected map[string]int
}

func newTestGateway(t *testing.T, name, marksFile string, key []byte, now *time.Time) *testGateway {
	t.Helper()
	tg := &testGateway{logs: &bytes.Buffer{}, rejected: map[string]int{}}
	log := slog.New(slog.NewTextHandler(tg.logs, nil))
	marks, err := OpenMarks(marksFile, *now)
	if err != nil {
		t.Fatal(err)
	}
	tg.g = &Group{cfg: Config{Name: name, Log: log, Now: func() time.Time { return *now },
		Rejected: func(r string) { tg.rejected[r]++ }},
		marks: marks, key: key, view: NewView(name, DefaultTimeout, time.Minute, *now)}
	tg.g.refused.log = log
	return tg
}

func (tg *testGateway) next() []byte {
	b, _ := tg.g.next()
	return b
}

func (tg *testGateway) hear(b []byte, from string) {
	tg.g.heard(b, netip.MustParseAddrPort(from+":7480"))
}

func (tg *testGateway) peers() []string {
	var out []string
	for _, p := range tg.g.view.Peers(tg.g.cfg.Now(), nil) {
		out = append(out, p.Name)
	}
	return out
}

func (tg *testGateway) wantRejected(t *testing.T, want map[string]int) {
	t.Helper()
	if fmt.Sprint(tg.rejected) != fmt.Sprint(want) {
		t.Errorf("rejected %v, want %v", tg.rejected, want)
	}
}

var siteKey = []byte("0123456789abcdef0123456789abcdef")

// twoGateways starts gw-a and gw-b on the site key, their marks files in dir.
func twoGateways(t *testing.T, now *time.Time) (dir string, a, b *testGateway) {
	dir = t.TempDir()
	a = newTestGateway(t, "gw-a", filepath.Join(dir, "a"), siteKey, now)
	b = newTestGateway(t, "gw-b", filepath.Join(dir, "b"), siteKey, now)
	return dir, a, b
}

// TestHeardRefusesForgedReplayedStale: a gateway takes its peer's heartbeats and refuses,
// counts and logs (naming the sender's address) forged ones (no MAC, another key, a signed
// non-heartbeat), replayed ones and stale ones (an incarnation before the peer's restart);
// none of them adds a peer, and forgetting the peer does not forget its mark.
func TestHeardRefusesForgedReplayedStale(t *testing.T) {
	now := t0
	dir, a, b := twoGateways(t, &now)
	first := a.next()
	b.hear(first, "10.0.0.1")
	second := a.next()
	b.hear(second, "10.0.0.1")
	b.wantRejected(t, map[string]int{})

	forged := Heartbeat{Name: "gw-evil", Incarnation: 1 << 62, Seq: 1}
	b.hear(Encode(forged, nil), "10.0.0.66")
	b.hear(Encode(forged, []byte("not the site's key at all")), "10.0.0.66")
	b.hear(append(append([]byte("{}"), '\n'), fmt.Sprintf("%x", sign([]byte("{}"), siteKey))...), "10.0.0.66")
	b.hear(first, "10.0.0.66")
	b.hear(second, "10.0.0.66")
	b.wantRejected(t, map[string]int{RejectUnsigned: 1, RejectBadMAC: 1, RejectMalformed: 1, RejectReplayed: 2})

	a = newTestGateway(t, "gw-a", filepath.Join(dir, "a"), siteKey, &now) // gw-a restarts
	b.hear(a.next(), "10.0.0.1")
	b.hear(second, "10.0.0.66")
	b.wantRejected(t, map[string]int{RejectUnsigned: 1, RejectBadMAC: 1, RejectMalformed: 1, RejectReplayed: 2, RejectStale: 1})
	if got := b.peers(); fmt.Sprint(got) != "[gw-a]" {
		t.Errorf("peers %v, want only gw-a", got)
	}
	for _, want := range []string{"from=10.0.0.66 reason=unsigned", "from=10.0.0.66 reason=bad-mac", "from=10.0.0.66 reason=replayed",
		"from=10.0.0.66 reason=stale", "claims=gw-a"} {
		if !strings.Contains(b.logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, b.logs)
		}
	}

	// An hour and more of silence: the view forgets gw-a, the marks do not.
	now = now.Add(2 * time.Hour)
	b.g.view.Forget(now, time.Hour, nil)
	if got := b.peers(); len(got) != 0 {
		t.Fatalf("peers %v after Forget, want none", got)
	}
	b.hear(second, "10.0.0.66")
	b.wantRejected(t, map[string]int{RejectUnsigned: 1, RejectBadMAC: 1, RejectMalformed: 1, RejectReplayed: 2, RejectStale: 2})
	if got := b.peers(); len(got) != 0 {
		t.Errorf("a replay after Forget brought back %v", got)
	}
}

// TestReceiverRestartAsksForANewIncarnation: a gateway that restarts refuses what it had
// heard of its peer before (here a replay and the peer's own next heartbeat alike), names
// the peer in its heartbeat, and the peer starts a new incarnation, which it takes.
func TestReceiverRestartAsksForANewIncarnation(t *testing.T) {
	now := t0
	dir, a, b := twoGateways(t, &now)
	captured := a.next()
	b.hear(captured, "10.0.0.1")

	b = newTestGateway(t, "gw-b", filepath.Join(dir, "b"), siteKey, &now) // gw-b restarts
	b.hear(captured, "10.0.0.66")
	b.hear(a.next(), "10.0.0.1")
	b.wantRejected(t, map[string]int{RejectStale: 2})
	// Until gw-a renews, gw-b listens on past its Timeout: gw-a is not gone, only unheard.
	if later := now.Add(DefaultTimeout + ms(100)); !b.g.view.Listening(later) {
		t.Errorf("gw-b stops listening %v after its start with gw-a not renewed", later.Sub(now))
	}
	inc := a.g.marks.Incarnation()
	a.hear(b.next(), "10.0.0.2")
	if a.g.marks.Incarnation() <= inc {
		t.Fatalf("gw-a kept incarnation %d after gw-b asked for a new one", inc)
	}
	b.hear(a.next(), "10.0.0.1")
	if later := now.Add(DefaultTimeout + ms(100)); b.g.view.Listening(later) {
		t.Errorf("gw-b still listens %v after its start with gw-a renewed", later.Sub(now))
	}
	b.hear(captured, "10.0.0.66")
	b.wantRejected(t, map[string]int{RejectStale: 3})
	if got := b.peers(); fmt.Sprint(got) != "[gw-a]" {
		t.Errorf("peers %v, want gw-a", got)
	}
	if !strings.Contains(a.logs.String(), "new incarnation") {
		t.Errorf("gw-a's log does not say it renewed:\n%s", a.logs)
	}
	// gw-b's heartbeats stop asking; gw-a does not renew again.
	inc = a.g.marks.Incarnation()
	a.hear(b.next(), "10.0.0.2")
	if a.g.marks.Incarnation() != inc {
		t.Errorf("gw-a renewed again")
	}
}

// TestRefusalsLogRateLimited: a flood from one sender is one line per refusalEvery; another
// sender still gets its own line.
func TestRefusalsLogRateLimited(t *testing.T) {
	now := t0
	b := newTestGateway(t, "gw-b", "", siteKey, &now)
	for range 50 {
		b.hear([]byte("junk"), "10.0.0.66")
	}
	b.hear([]byte("junk"), "10.0.0.67")
	if n := strings.Count(b.logs.String(), "refused a heartbeat"); n != 2 {
		t.Errorf("%d log lines for 51 refusals from two senders, want 2:\n%s", n, b.logs)
	}
	now = now.Add(refusalEvery)
	b.hear([]byte("junk"), "10.0.0.66")
	if !strings.Contains(b.logs.String(), "refusedSinceLastLine=49") {
		t.Errorf("the next line does not count what it left out:\n%s", b.logs)
	}
	b.wantRejected(t, map[string]int{RejectUnsigned: 52})
}

// TestAcceptedKeys: during a rotation a gateway takes heartbeats signed with the key it
// accepts besides its own, and refuses others.
func TestAcceptedKeys(t *testing.T) {
	now := t0
	next := []byte("the next key of the site, 32 byte")
	a := newTestGateway(t, "gw-a", "", siteKey, &now)
	b := newTestGateway(t, "gw-b", "", next, &now)
	b.g.accept = [][]byte{siteKey}
	b.hear(a.next(), "10.0.0.1")
	c := newTestGateway(t, "gw-c", "", next, &now)
	c.hear(a.next(), "10.0.0.1")
	b.wantRejected(t, map[string]int{})
	c.wantRejected(t, map[string]int{RejectBadMAC: 1})
}

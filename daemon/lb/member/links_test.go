package member

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/link"
)

// TestCheckLinksFollowsCarrier: with every heartbeat interface down the gateway is
// isolated, and a link coming back makes it listen again before it claims. The
// interfaces are link.Fake's, so no root is needed.
func TestCheckLinksFollowsCarrier(t *testing.T) {
	now := time.Unix(1000, 0)
	links := link.NewFake(
		link.Link{Interface: net.Interface{Index: 2, Name: "hb0"}, Up: true},
		link.Link{Interface: net.Interface{Index: 3, Name: "hb1"}},
	)
	g := &Group{
		cfg:   Config{Name: "gw-a", Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }},
		links: links,
		view:  NewView("gw-a", time.Second, time.Minute, now),
		joined: map[string]*net.Interface{
			"hb0": {Index: 2, Name: "hb0"},
			"hb1": {Index: 3, Name: "hb1"},
		},
		linkUp: map[string]bool{},
	}
	step := func(what string, isolated, listening bool) {
		t.Helper()
		g.checkLinks()
		if g.view.isolated != isolated || g.view.Listening(now) != listening {
			t.Errorf("%s: isolated %v, listening %v; want %v, %v", what, g.view.isolated, g.view.Listening(now), isolated, listening)
		}
	}
	now = now.Add(2 * time.Second) // done listening since the start
	step("one link up", false, false)
	links.Set(link.Link{Interface: net.Interface{Index: 2, Name: "hb0"}})
	step("every link down", true, false)
	links.Delete("hb1")
	step("one link gone, the other down", true, false)
	now = now.Add(time.Minute)
	links.Set(link.Link{Interface: net.Interface{Index: 2, Name: "hb0"}, Up: true})
	step("a link back", false, true)
	now = now.Add(2 * time.Second)
	step("listened a Timeout since", false, false)
}

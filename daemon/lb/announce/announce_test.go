package announce

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

func TestNormalise(t *testing.T) {
	v4 := netip.MustParseAddr("10.77.0.100")
	mapped := netip.MustParseAddr("::ffff:10.77.0.100")
	v6 := netip.MustParseAddr("2001:db8::1")
	want, errs := normalise(map[netip.Addr][]string{
		v4:                                  {"eth1", "eth0", "eth1"},
		mapped:                              {"eth2"},
		v6:                                  {"eth0", ""},
		netip.MustParseAddr("fe80::1%eth0"): {"eth0"},
		netip.MustParseAddr("0.0.0.0"):      {"eth0"},
		netip.MustParseAddr("ff02::1"):      {"eth0"},
		netip.MustParseAddr("127.0.0.1"):    {"eth0"},
		netip.MustParseAddr("10.77.0.101"):  nil,
		{}:                                  {"eth0"},
	})
	if w := map[netip.Addr][]string{v4: {"eth0", "eth1", "eth2"}, v6: {"eth0"}}; !reflect.DeepEqual(want, w) {
		t.Errorf("normalise = %v, want %v", want, w)
	}
	var msgs []string
	for _, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Interface != "" {
			t.Errorf("error %v is not an *Error naming only the address", err)
		}
		msgs = append(msgs, err.Error())
	}
	got := strings.Join(msgs, "\n")
	for _, w := range []string{
		"announce invalid IP: invalid address",
		"announce 0.0.0.0: not a unicast address",
		"announce 10.77.0.101: no interface to announce it on",
		"announce 127.0.0.1: not a unicast address",
		"announce 2001:db8::1: empty interface name",
		"announce fe80::1%eth0: address has a zone",
		"announce ff02::1: not a unicast address",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("errors lack %q:\n%s", w, got)
		}
	}
	if len(errs) != 7 {
		t.Errorf("%d errors, want 7:\n%s", len(errs), got)
	}
}

// TestSetReportsEachPair runs unprivileged: it opens no socket, since loopback has no
// Ethernet address and the other interface does not exist.
func TestSetReportsEachPair(t *testing.T) {
	a, err := New(slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParseAddr("10.77.0.100"), netip.MustParseAddr("2001:db8::1")
	err = a.Set(map[netip.Addr][]string{v4: {"lo", "egnone0"}, v6: {"egnone0"}})
	if !errors.Is(err, ErrNoMAC) || !errors.Is(err, ErrNoInterface) {
		t.Fatalf("Set = %v; want ErrNoMAC and ErrNoInterface", err)
	}
	for _, w := range []string{
		"announce 10.77.0.100 on egnone0: no such interface",
		`announce 10.77.0.100 on lo: interface has no Ethernet address (hardware address "")`,
		"announce 2001:db8::1 on egnone0: no such interface",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Set error lacks %q:\n%v", w, err)
		}
	}
	want := []AddrStats{
		{Addr: v4, Failed: map[string]string{"egnone0": "no such interface", "lo": `interface has no Ethernet address (hardware address "")`}},
		{Addr: v6, Failed: map[string]string{"egnone0": "no such interface"}},
	}
	if got := a.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("Stats = %+v\nwant %+v", got, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
	if got := a.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("after Run, Stats = %+v\nwant %+v (the last Set stays wanted)", got, want)
	}
}

// TestReaderPanicEndsRun: a reader's panic comes back as Run's error, for the supervisor
// to restart it, instead of killing the process.
func TestReaderPanicEndsRun(t *testing.T) {
	a := newAnnouncer(nil, l2.NewFake())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(context.Background()) }()
	waitFor(t, "Run starts", func() (bool, string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.running {
			a.startReaders(&link{name: "egfake0"}, panicConn{}, nil)
		}
		return a.running, "not running"
	})
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "reader on egfake0 panicked") {
		t.Errorf("Run = %v; want the reader's panic", err)
	}
	if err := a.Set(nil); err != nil {
		t.Errorf("Set after Run = %v", err)
	}
}

// panicConn is an ARP socket whose first read panics.
type panicConn struct{ l2.ARPConn }

func (panicConn) Read() (l2.ARP, error) { panic("read on a broken socket") }

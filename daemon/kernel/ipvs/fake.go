package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// Fake is an in-memory IPVS table for tests. It records every call, can fail like the
// kernel does (Fail), and can imitate moby/ipvs without the module (Silent: changes
// "succeed" and do nothing) or a kernel that stores something else than it was given
// (Mangle).
type Fake struct {
	mu       sync.Mutex
	services map[ipvsplan.VSKey]*fakeEntry
	// Calls lists every call made, as "NewService TCP 10.96.0.10:80" and the like.
	Calls []string
	// Fail, when it returns an error for a call ("NewService TCP  10.96.0.10:80"), makes
	// the call fail with it.
	Fail func(call string) error
	// Silent makes changes return nil without doing anything; SilentDests only those of
	// real servers.
	Silent, SilentDests bool
	// Mangle, if set, changes each virtual server before it is stored.
	Mangle func(*Service)
}

type fakeEntry struct {
	svc   Service
	dests map[netip.AddrPort]Destination
}

var _ IPVS = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{services: map[ipvsplan.VSKey]*fakeEntry{}} }

func (f *Fake) call(name string, parts ...any) error {
	c := name
	for _, p := range parts {
		c += " " + strings.Join(strings.Fields(fmt.Sprint(p)), " ")
	}
	f.Calls = append(f.Calls, c)
	if f.Fail != nil {
		return f.Fail(c)
	}
	return nil
}

// Mutations returns the calls that change the table.
func (f *Fake) Mutations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.Calls {
		if !strings.HasPrefix(c, "Get") {
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets the recorded calls.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls = nil
}

// SetConns sets a real server's connection counts, as traffic would.
func (f *Fake) SetConns(k ipvsplan.VSKey, real netip.AddrPort, active, inactive int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.services[k]; e != nil {
		if d, ok := e.dests[real]; ok {
			d.ActiveConns, d.InactiveConns = active, inactive
			e.dests[real] = d
		}
	}
}

// Dump lists the table as ipvsadm -Ln does; it records no call.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var entries []Entry
	for _, e := range f.services {
		en := Entry{Service: e.svc}
		for _, d := range e.dests {
			en.Destinations = append(en.Destinations, d)
		}
		slices.SortFunc(en.Destinations, func(a, b Destination) int { return a.AddrPort().Compare(b.AddrPort()) })
		entries = append(entries, en)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return a.VSKey.Compare(b.VSKey) })
	return Format(entries, false)
}

// GetServices implements IPVS.
func (f *Fake) GetServices() ([]Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GetServices"); err != nil {
		return nil, err
	}
	var out []Service
	for _, e := range f.services {
		out = append(out, e.svc)
	}
	slices.SortFunc(out, func(a, b Service) int { return a.VSKey.Compare(b.VSKey) })
	return out, nil
}

// GetDestinations implements IPVS.
func (f *Fake) GetDestinations(s Service) ([]Destination, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GetDestinations", s.VSKey); err != nil {
		return nil, err
	}
	e := f.services[s.VSKey]
	if e == nil {
		return nil, fmt.Errorf("get real servers of %s: %w", s.VSKey, unix.ESRCH)
	}
	var out []Destination
	for _, d := range e.dests {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Destination) int { return a.AddrPort().Compare(b.AddrPort()) })
	return out, nil
}

func (f *Fake) store(s Service) Service {
	s.Stats = Counters{}
	if f.Mangle != nil {
		f.Mangle(&s)
	}
	return s
}

// service records a call that changes the virtual server s (with s's key and parts) and,
// unless Silent, makes the change: fn, given s's entry (nil when there is none).
func (f *Fake) service(call string, s Service, fn func(e *fakeEntry) error, parts ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(call, append([]any{s.VSKey}, parts...)...); err != nil {
		return err
	}
	if f.Silent {
		return nil
	}
	return fn(f.services[s.VSKey])
}

// NewService implements IPVS.
func (f *Fake) NewService(s Service) error {
	return f.service("NewService", s, func(e *fakeEntry) error {
		if e != nil {
			return fmt.Errorf("create virtual server %s: %w", s.VSKey, unix.EEXIST)
		}
		f.services[s.VSKey] = &fakeEntry{svc: f.store(s), dests: map[netip.AddrPort]Destination{}}
		return nil
	}, s.Scheduler, s.Timeout)
}

// UpdateService implements IPVS.
func (f *Fake) UpdateService(s Service) error {
	return f.service("UpdateService", s, func(e *fakeEntry) error {
		if e == nil {
			return fmt.Errorf("update virtual server %s: %w", s.VSKey, unix.ESRCH)
		}
		e.svc = f.store(s)
		return nil
	}, s.Scheduler, s.Timeout)
}

// DelService implements IPVS.
func (f *Fake) DelService(s Service) error {
	return f.service("DelService", s, func(e *fakeEntry) error {
		if e == nil {
			return fmt.Errorf("delete virtual server %s: %w", s.VSKey, unix.ESRCH)
		}
		delete(f.services, s.VSKey)
		return nil
	})
}

// dest is service for a change of one of s's real servers, which SilentDests also
// silences; fn gets s's entry and whether it has d.
func (f *Fake) dest(call string, s Service, d Destination, fn func(e *fakeEntry, have bool) error) error {
	return f.service(call, s, func(e *fakeEntry) error {
		if f.SilentDests {
			return nil
		}
		if e == nil {
			return fmt.Errorf("%s %s: %w", call, s.VSKey, unix.ESRCH)
		}
		_, have := e.dests[d.AddrPort()]
		return fn(e, have)
	}, "->", d.AddrPort(), d.Weight)
}

// NewDestination implements IPVS.
func (f *Fake) NewDestination(s Service, d Destination) error {
	return f.dest("NewDestination", s, d, func(e *fakeEntry, have bool) error {
		if have {
			return fmt.Errorf("add real server %s: %w", d.AddrPort(), unix.EEXIST)
		}
		d.ActiveConns, d.InactiveConns, d.Stats = 0, 0, Counters{}
		e.dests[d.AddrPort()] = d
		return nil
	})
}

// UpdateDestination implements IPVS.
func (f *Fake) UpdateDestination(s Service, d Destination) error {
	return f.dest("UpdateDestination", s, d, func(e *fakeEntry, have bool) error {
		if !have {
			return fmt.Errorf("update real server %s: %w", d.AddrPort(), unix.ENOENT)
		}
		cur := e.dests[d.AddrPort()]
		cur.Weight, cur.Forward = d.Weight, d.Forward
		e.dests[d.AddrPort()] = cur
		return nil
	})
}

// DelDestination implements IPVS.
func (f *Fake) DelDestination(s Service, d Destination) error {
	return f.dest("DelDestination", s, d, func(e *fakeEntry, have bool) error {
		if !have {
			return fmt.Errorf("delete real server %s: %w", d.AddrPort(), unix.ENOENT)
		}
		delete(e.dests, d.AddrPort())
		return nil
	})
}

// Flush implements IPVS.
func (f *Fake) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Flush"); err != nil {
		return err
	}
	if !f.Silent {
		f.services = map[ipvsplan.VSKey]*fakeEntry{}
	}
	return nil
}

// Package lb attracts the LoadBalancer IPs of a bare-metal site to its gateways: the speaker
// joins what the proxy programs (the Services' LoadBalancer IPs), the pools (which interfaces
// each IP is announced on), the membership (which gateway owns which IP, lb/member) and the
// announcer (ARP and NDP on those interfaces, lb/announce). Allocation of the IPs to Services
// is lb/alloc's, run by one gateway at a time.
package lb

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/lb/member"
)

// Announcer makes the segment send an address's traffic to this gateway: Set replaces the
// addresses owned, each with the interfaces to announce it on.
type Announcer interface {
	Set(owned map[netip.Addr][]string) error
}

// Members is the membership of the gateways on the segment. The speaker reports what it
// gives the announcer, before (Applying) and after (Applied), with the members it came
// from: a gateway hands its addresses over only once its announcer has let them go, and
// takes a peer's only once the peer's has (see member.View).
type Members interface {
	Members() []string
	Changed() <-chan struct{}
	Applying(members []string)
	Applied(members []string)
}

// Speaker announces the addresses this gateway owns.
type Speaker struct {
	self      string
	members   Members
	announcer Announcer
	log       *slog.Logger

	mu      sync.Mutex
	addrs   map[netip.Addr][]string // every LB IP with its interfaces
	owned   map[netip.Addr][]string // what was last given to the announcer
	current []string                // the members the owners came from
	failed  error                   // the announcer's last error
	trigger chan struct{}
}

// NewSpeaker returns a speaker for gateway self.
func NewSpeaker(self string, m Members, a Announcer, log *slog.Logger) *Speaker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Speaker{self: self, members: m, announcer: a, log: log, addrs: map[netip.Addr][]string{},
		trigger: make(chan struct{}, 1)}
}

// SetAddresses replaces the LoadBalancer IPs to announce, each with its pool's interfaces
// (an address of no pool is not given).
func (s *Speaker) SetAddresses(addrs map[netip.Addr][]string) {
	s.mu.Lock()
	same := maps.EqualFunc(addrs, s.addrs, slices.Equal[[]string])
	if !same {
		s.addrs = maps.Clone(addrs)
	}
	s.mu.Unlock()
	if !same {
		s.poke()
	}
}

func (s *Speaker) poke() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Run announces until ctx ends: at every change of the addresses or the members, and every
// retry interval while the announcer fails. At the end it announces nothing.
func (s *Speaker) Run(ctx context.Context) {
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	s.update()
	for {
		select {
		case <-ctx.Done():
			if err := s.announcer.Set(nil); err != nil {
				s.log.Warn("announcements not all withdrawn", "err", err)
			}
			return
		case <-s.trigger:
		case <-s.members.Changed():
		case <-retry.C:
			s.mu.Lock()
			failed := s.failed != nil
			s.mu.Unlock()
			if !failed {
				continue
			}
		}
		s.update()
	}
}

// update computes the owned addresses and gives them to the announcer.
func (s *Speaker) update() {
	members := s.members.Members()
	s.mu.Lock()
	addrs := sortedAddrs(s.addrs)
	owned := map[netip.Addr][]string{}
	for _, a := range member.Owned(addrs, members, s.self) {
		owned[a] = s.addrs[a]
	}
	changed := !maps.EqualFunc(owned, s.owned, slices.Equal[[]string])
	prev := s.owned
	s.mu.Unlock()

	// An address dropped is not answered once Set returns, whatever else failed.
	s.members.Applying(members)
	err := s.announcer.Set(owned)
	s.members.Applied(members)
	s.mu.Lock()
	s.owned, s.current, s.failed = owned, members, err
	s.mu.Unlock()
	if changed {
		var took, gave []string
		for a := range owned {
			if _, ok := prev[a]; !ok {
				took = append(took, a.String())
			}
		}
		for a := range prev {
			if _, ok := owned[a]; !ok {
				gave = append(gave, a.String())
			}
		}
		slices.Sort(took)
		slices.Sort(gave)
		s.log.Info("LoadBalancer IPs of this gateway", "owned", len(owned), "took", strings.Join(took, ","),
			"gave", strings.Join(gave, ","), "members", strings.Join(members, ","))
	}
	if err != nil {
		s.log.Error("announcing LoadBalancer IPs", "err", err)
	}
}

// Status is what the speaker announces, for the dashboard.
type Status struct {
	Members []string            `json:"members"`
	Owned   map[string][]string `json:"owned"`  // address -> interfaces
	Others  map[string]string   `json:"others"` // address -> the member that owns it
	Error   string              `json:"error,omitempty"`
}

// Status reports what this gateway announces and who owns the other addresses.
func (s *Speaker) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Members: slices.Clone(s.current), Owned: map[string][]string{}, Others: map[string]string{}}
	addrs := sortedAddrs(s.addrs)
	for a, o := range member.Owners(addrs, s.current) {
		if o == s.self {
			st.Owned[a.String()] = slices.Clone(s.addrs[a])
		} else {
			st.Others[a.String()] = o
		}
	}
	if s.failed != nil {
		st.Error = s.failed.Error()
	}
	return st
}

func sortedAddrs(m map[netip.Addr][]string) []netip.Addr {
	return slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
}

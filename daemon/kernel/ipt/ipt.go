// Package ipt programs edgegate's iptables plan (package plan) through netlink with
// google/nftables, in exactly the nf_tables encoding iptables-nft 1.8.9 writes, so that the
// stock iptables-nft-save, iptables-nft -L and iptables-nft-restore read edgegate's rules as
// ordinary iptables rules. The firmware ships no iptables binary.
//
// The ip/ip6 "nat" and "filter" tables are shared with other iptables users (Docker, the
// operator's own rules): edgegate owns only chains whose name starts with iptplan.Prefix
// and the rules in built-in chains that carry one of iptplan.HookComments, and never
// flushes or deletes anything else.
package ipt

import (
	"fmt"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/edgegate/edgegate/daemon/kernel/nlbatch"
	"github.com/edgegate/edgegate/daemon/model"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// Ruleset is what the proxy needs from an iptables backend; Kernel and Fake implement it.
type Ruleset interface {
	// Apply makes the kernel hold exactly these plans (one per family). A full apply
	// rewrites every edgegate chain and re-inserts edgegate's rules at the top of the
	// built-in chains, removing anything else edgegate-owned found there (repairing hand
	// edits); a partial apply rewrites only chains whose rules changed since the last
	// apply, adds new chains and deletes gone ones. A family missing from plans loses
	// edgegate's rules. One atomic nftables batch per Apply; on error the kernel keeps
	// its previous rules and the next Apply is full.
	Apply(plans []*iptplan.Tables, full bool) (Stats, error)
	// Cleanup removes every edgegate chain and every rule edgegate added to built-in
	// chains, in the ip and ip6 nat and filter tables.
	Cleanup() error
}

// Stats describes one apply.
type Stats struct {
	Full    bool
	Chains  int // chains written: edgegate chains added or rewritten, built-in chains whose edgegate rules were replaced
	Rules   int // rules written
	Deleted int // edgegate chains deleted
	// Listed: a full apply listed the tables' chains, as something else had committed
	// since the last apply (or it failed, or it is the first); otherwise it knew them.
	Listed bool
	// Kernel is the time the kernel took over the batch: from its sendmsg to its last
	// acknowledgement read.
	Kernel time.Duration
}

// Kernel is the netlink-backed Ruleset for the current network namespace.
type Kernel struct {
	mu      sync.Mutex
	applied map[model.Family]*iptplan.Tables
	dirty   bool
	sock    nlbatch.Socket // opened by the first apply, in its network namespace
	// gen is the nftables generation the last apply left; while the kernel still reports
	// it and untouched is set, nobody has committed since, and edgegate's chains are
	// exactly applied's.
	gen       uint32
	untouched bool
}

var _ Ruleset = (*Kernel)(nil)

// New returns a Kernel backend for the current network namespace; its first Apply is full.
func New() *Kernel { return &Kernel{applied: map[model.Family]*iptplan.Tables{}, dirty: true} }

// families are the table families edgegate programs, in the order it programs them.
var families = []model.Family{model.IPv4, model.IPv6}

// tableNames are the iptables tables edgegate uses.
var tableNames = []string{"filter", "nat"}

func tableFamily(f model.Family) nftables.TableFamily {
	if f == model.IPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

// receiveBuffer limits the reading connection's buffer.
const receiveBuffer = 4 << 20

// dial opens the netlink connection that reads the kernel's tables; batches go through
// nlbatch, which sizes its socket for them (an ack and an echo for every message, as
// google/nftables asks, overflowed a 64 MiB receive buffer at 5,000 services). A dump
// arrives while it is read: a few MiB of buffer (a limit, not an allocation) are plenty.
func dial() (*nftables.Conn, error) {
	c, err := nftables.New(nftables.WithSockOptions(func(nc *netlink.Conn) error {
		if err := nc.SetReadBuffer(receiveBuffer); err != nil {
			return err
		}
		return nc.SetOption(netlink.ExtendedAcknowledge, true)
	}))
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

// Apply implements Ruleset.
func (k *Kernel) Apply(plans []*iptplan.Tables, full bool) (Stats, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	full = full || k.dirty
	st := Stats{Full: full}
	read, err := dial()
	if err != nil {
		return st, err
	}
	nb, err := nlbatch.New()
	if err != nil {
		return st, err
	}
	conn := nb.Conn()
	byFamily := map[model.Family]*iptplan.Tables{}
	for _, p := range plans {
		if byFamily[p.Family] != nil {
			return st, fmt.Errorf("two %s plans", p.Family)
		}
		byFamily[p.Family] = p
	}
	// Unless something else committed since the last apply, edgegate's chains are what it
	// applied, and a full apply need not list them.
	gen, genErr := nlbatch.Generation()
	clean := !k.dirty && k.untouched && genErr == nil && gen == k.gen
	k.dirty, k.untouched = true, false
	for _, f := range families {
		p := byFamily[f]
		if p == nil {
			if full || k.applied[f] != nil {
				if err := queueRemoval(read, conn, f, &st); err != nil {
					return st, err
				}
			}
			continue
		}
		for _, name := range tableNames {
			want := p.Table(name)
			if want == nil {
				want = &iptplan.Table{Name: name}
			}
			ts := newTableSync(nb, read, f, want, &st)
			var prev *iptplan.Table
			if old := k.applied[f]; !full && old != nil {
				if prev = old.Table(name); prev == nil {
					prev = &iptplan.Table{Name: name}
				}
			}
			if prev == nil {
				var known *iptplan.Table
				if clean {
					// A family the last apply left out has no edgegate chains.
					if last := k.applied[f]; last != nil {
						known = last.Table(name)
					}
					if known == nil {
						known = &iptplan.Table{Name: name}
					}
				}
				err = ts.full(known)
			} else {
				err = ts.partial(prev)
			}
			if err != nil {
				return st, fmt.Errorf("%s %s table: %w", f, name, err)
			}
		}
	}
	if st.Kernel, err = nb.Commit(&k.sock, full); err != nil {
		return st, err
	}
	k.applied = byFamily
	k.dirty = false
	// The tables hold exactly what was applied if this apply read them whole (a full one
	// that listed them) or knew them, and committed nothing but this batch, if anything.
	after, err := nlbatch.Generation()
	k.gen = after
	k.untouched = err == nil && genErr == nil && (full || clean) && (after == gen || after == nlbatch.NextGeneration(gen))
	return st, nil
}

// Cleanup implements Ruleset.
func (k *Kernel) Cleanup() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dirty = true
	k.applied = map[model.Family]*iptplan.Tables{}
	read, err := dial()
	if err != nil {
		return err
	}
	nb, err := nlbatch.New()
	if err != nil {
		return err
	}
	var st Stats
	for _, f := range families {
		if err := queueRemoval(read, nb.Conn(), f, &st); err != nil {
			return err
		}
	}
	if err := nb.Send(nil); err != nil {
		return fmt.Errorf("remove edgegate rules: %w", err)
	}
	return nil
}

package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Why a heartbeat was refused, as the log and edgegate_lb_heartbeats_rejected_total say it.
const (
	RejectUnsigned  = "unsigned"  // no MAC, where the site has a key
	RejectBadMAC    = "bad-mac"   // a MAC, but not by any key of the site's
	RejectMalformed = "malformed" // not a heartbeat
	RejectReplayed  = "replayed"  // a heartbeat of the sender's incarnation already heard, or an older one of it
	RejectStale     = "stale"     // an incarnation of the sender older than one already heard, or than this gateway's restart
)

// RejectReasons are every reason, for metrics to start at zero.
var RejectReasons = []string{RejectUnsigned, RejectBadMAC, RejectMalformed, RejectReplayed, RejectStale}

// MaxMarks bounds the peers Marks remembers: a site's gateways over the years. Beyond it
// the one heard least recently is dropped (only key holders add names).
const MaxMarks = 1024

// Marks refuses replayed heartbeats across restarts of either side, with no clock: gateways
// may boot without a trustworthy one, so no timestamp or clock window decides freshness.
//
// The mechanism is a persisted high-water mark per peer plus incarnations that strictly
// increase across restarts:
//   - This gateway's own incarnation is a counter kept in the file and written (fsync,
//     rename) before a heartbeat carries it, so every restart sends above all it sent before:
//     what an attacker captured from an earlier run is older than what its peers hold.
//   - A peer's mark is (incarnation, seq), kept apart from the View: forgetting a silent peer
//     forgets nothing here. A peer's new incarnation is written before it is believed.
//     Sequence numbers are not written (ten a second would wear a gateway's flash): after a
//     restart of this gateway, every incarnation it had heard is sealed whole (seq = max),
//     so that no heartbeat captured before the restart is taken, and the heartbeats this
//     gateway sends name each sealed peer (Heartbeat.Renew) until it starts a new
//     incarnation, which it does on hearing that (Group), within one heartbeat.
//
// A nonce exchange when a peer appears would do too, but needs both directions of the
// segment; one-way partitions are a case the membership must settle (see View).
//
// Marks is not safe for concurrent use; Group serialises it.
type Marks struct {
	file  string // "": in memory only (a test, or --lb-insecure-unsigned-heartbeats)
	own   int64
	peers map[string]*peerMark
	tick  uint64 // orders the peers by when last heard, for MaxMarks
}

type peerMark struct {
	Mark
	heard   uint64
	refused int64 // the newest incarnation refused as sealed, 0 when none
}

// sealed is a mark read back after a restart: the whole incarnation is behind us.
const sealed = math.MaxUint64

// marksFile is what Marks writes.
type marksFile struct {
	Incarnation int64            `json:"incarnation"`
	Peers       map[string]int64 `json:"peers"`
}

// OpenMarks reads file (a missing file is a first start) and starts a new incarnation, written
// before it returns. now only ever raises the counter: an incarnation above a start time of
// an older edgegate (which used those) keeps peers that still run one taking this one as new;
// the counter alone keeps it strictly increasing, whatever the clock says.
func OpenMarks(file string, now time.Time) (*Marks, error) {
	m := &Marks{file: file, peers: map[string]*peerMark{}}
	var f marksFile
	if file != "" {
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("heartbeat marks: %w", err)
		default:
			if err := json.Unmarshal(b, &f); err != nil {
				return nil, fmt.Errorf("heartbeat marks %s: %w", file, err)
			}
		}
	}
	for name, inc := range f.Peers {
		m.peers[name] = &peerMark{Mark: Mark{Incarnation: inc, Seq: sealed}}
	}
	m.own = f.Incarnation
	if _, err := m.Renew(now); err != nil {
		return nil, err
	}
	return m, nil
}

// Incarnation is this gateway's incarnation now.
func (m *Marks) Incarnation() int64 { return m.own }

// Renew starts a new incarnation of this gateway, written before it is returned.
func (m *Marks) Renew(now time.Time) (int64, error) {
	if m.own == math.MaxInt64 {
		return 0, errors.New("heartbeat marks: the incarnation counter is exhausted")
	}
	prev := m.own
	m.own = max(m.own+1, now.UnixNano())
	if err := m.save(); err != nil {
		m.own = prev
		return 0, err
	}
	return m.own, nil
}

// Admit decides whether heartbeat h (its MAC checked) is fresh and records it: reject is ""
// for a fresh one, else RejectReplayed or RejectStale. err reports a mark that could not be
// written; h is admitted all the same (the protection within this run holds, and refusing a
// live peer for a disk's fault would make two gateways answer for its addresses).
func (m *Marks) Admit(h Heartbeat) (reject string, err error) {
	p := m.peers[h.Name]
	switch {
	case p == nil:
	case h.Incarnation < p.Incarnation:
		return RejectStale, nil
	case h.Incarnation == p.Incarnation && p.Seq == sealed:
		p.refused = max(p.refused, h.Incarnation)
		return RejectStale, nil
	case h.Incarnation == p.Incarnation && h.Seq <= p.Seq:
		return RejectReplayed, nil
	}
	m.tick++
	if p != nil && p.Incarnation == h.Incarnation {
		p.Seq, p.heard = h.Seq, m.tick
		return "", nil
	}
	m.peers[h.Name] = &peerMark{Mark: markOf(h), heard: m.tick}
	m.bound()
	return "", m.save()
}

// Renewing names the peers whose incarnation this gateway refuses as older than its own
// restart, each with that incarnation, for its heartbeats (Heartbeat.Renew).
func (m *Marks) Renewing() map[string]int64 {
	var out map[string]int64
	for name, p := range m.peers {
		if p.refused != 0 && p.Seq == sealed {
			if out == nil {
				out = map[string]int64{}
			}
			out[name] = p.refused
		}
	}
	return out
}

// bound drops the peers heard least recently beyond MaxMarks.
func (m *Marks) bound() {
	for len(m.peers) > MaxMarks {
		oldest := ""
		for _, name := range slices.Sorted(maps.Keys(m.peers)) {
			if oldest == "" || m.peers[name].heard < m.peers[oldest].heard {
				oldest = name
			}
		}
		delete(m.peers, oldest)
	}
}

// save writes the file atomically: a new file, synced, renamed over the old, the directory
// synced, so that a crash leaves the old marks or the new ones.
func (m *Marks) save() error {
	if m.file == "" {
		return nil
	}
	f := marksFile{Incarnation: m.own, Peers: map[string]int64{}}
	for name, p := range m.peers {
		f.Peers[name] = p.Incarnation
	}
	b, _ := json.Marshal(f)
	dir := filepath.Dir(m.file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("heartbeat marks: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".lb-marks-*")
	if err != nil {
		return fmt.Errorf("heartbeat marks: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), m.file)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("heartbeat marks %s: %w", m.file, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

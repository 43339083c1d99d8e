package member

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// Encode is heartbeat hb as it goes on the wire: its JSON, followed by a line with its
// HMAC-SHA256 under key when key is set.
func Encode(hb Heartbeat, key []byte) []byte {
	b, _ := json.Marshal(hb)
	if len(key) == 0 {
		return b
	}
	return append(append(b, '\n'), hex.EncodeToString(sign(b, key))...)
}

// decode reads a heartbeat signed with key or one of accept (unsigned ones too when key is
// empty: the operator opted out); reject says why not (RejectReasons).
func decode(b []byte, key []byte, accept [][]byte) (hb Heartbeat, reject string) {
	body, mac, signed := strings.Cut(string(b), "\n")
	if len(key) > 0 {
		got, err := hex.DecodeString(mac)
		switch {
		case !signed:
			return Heartbeat{}, RejectUnsigned
		case err != nil || !signedBy(body, got, key, accept):
			return Heartbeat{}, RejectBadMAC
		}
	}
	if err := json.Unmarshal([]byte(body), &hb); err != nil || hb.Name == "" || len(hb.Name) > 253 {
		return Heartbeat{}, RejectMalformed
	}
	return hb, ""
}

func signedBy(body string, mac, key []byte, accept [][]byte) bool {
	for _, k := range append([][]byte{key}, accept...) {
		if hmac.Equal(mac, sign([]byte(body), k)) {
			return true
		}
	}
	return false
}

func sign(b, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}

// refusalEvery is how often one sender's refusals of one reason are logged at most.
const refusalEvery = 10 * time.Second

// maxRefusalSenders bounds the senders logged one by one: beyond them (spoofed source
// addresses) the rest are summed up in one line per refusalEvery.
const maxRefusalSenders = 256

// refusalLog logs refused heartbeats naming the sender's address, rate-limited: a host that
// floods the segment with forgeries neither fills the log nor holds up the group.
type refusalLog struct {
	log    *slog.Logger
	last   map[refusalKey]*refusalCount
	others refusalCount
}

type refusalKey struct {
	from   netip.Addr
	reason string
}

type refusalCount struct {
	logged     time.Time
	suppressed int
}

// refuse records one refusal at now and logs it unless the sender's (or, past
// maxRefusalSenders, anyone's) was logged within refusalEvery.
func (l *refusalLog) refuse(from netip.AddrPort, name, reason string, now time.Time) {
	if l.last == nil {
		l.last = map[refusalKey]*refusalCount{}
	}
	k := refusalKey{from.Addr().Unmap(), reason}
	c, ok := l.last[k]
	if !ok && len(l.last) >= maxRefusalSenders {
		c = &l.others
	} else if !ok {
		c = &refusalCount{}
		l.last[k] = c
	}
	if !c.logged.IsZero() && now.Sub(c.logged) < refusalEvery {
		c.suppressed++
		return
	}
	attrs := []any{"from", k.from, "reason", reason, "refusedSinceLastLine", c.suppressed}
	if c == &l.others {
		attrs[1] = "(one of many senders)"
	}
	if name != "" {
		attrs = append(attrs, "claims", name)
	}
	if l.log != nil {
		l.log.Warn("heartbeats: refused a heartbeat", attrs...)
	}
	c.logged, c.suppressed = now, 0
}

// Package nlbatch sends an nftables batch built with google/nftables the way nft(8) does:
// one sendmsg, an acknowledgement asked for the last message only, errors read back.
//
// google/nftables (v0.3.0) asks the kernel to acknowledge every message and reads the
// acknowledgements one receive call at a time. A full sync of 10,000 Services is about
// 700,000 messages: the acknowledgements overflowed even a 512 MiB receive buffer (ENOBUFS,
// the sync failed) and reading them was most of a smaller sync's time. The kernel reports
// every failed message whether or not an acknowledgement was asked for, and it processes the
// whole batch inside the sendmsg call, so one acknowledgement, on the last message, says the
// batch was read to its end; any error before it says the batch was refused as a whole.
//
// The library still encodes most messages: a Batch hands it a connection that records the
// batch instead of sending it (its documented test hook, nltest), answering each receive
// with an acknowledgement, and then sends the recorded batch itself. Messages encoded
// elsewhere (the nftables backend's rules) join the batch in order through Add. Each message
// is laid out as the kernel reads it the moment it is recorded, so a batch is held once, not
// as messages and again as the buffer sent.
package nlbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Batch records one nftables batch.
type Batch struct {
	conn *nftables.Conn

	mu   sync.Mutex
	out  encoded // the batch's begin and what was recorded, encoded
	sent bool
}

// New returns an empty batch. Queue messages on Conn, then Send.
func New() (*Batch, error) {
	b := &Batch{}
	c, err := nftables.New(nftables.WithTestDial(b.record))
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	b.conn = c
	return b, nil
}

// Conn is the connection to queue the batch's messages on (AddTable, AddRule, ...). Its
// Flush records; it never reaches the kernel. Reads (List*, Get*) need a real connection.
func (b *Batch) Conn() *nftables.Conn { return b.conn }

// record is the recording connection's other end: a flush's first call gets what was
// queued since the last one, between a begin and an end message; later calls (nil) are
// google/nftables reading the acknowledgement of each message in turn. Each gets one.
func (b *Batch) record(req []netlink.Message) ([]netlink.Message, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if req != nil {
		if len(req) < 2 || req[0].Header.Type != unix.NFNL_MSG_BATCH_BEGIN || req[len(req)-1].Header.Type != unix.NFNL_MSG_BATCH_END {
			return nil, errors.New("nlbatch: a flush without its batch begin and end")
		}
		for _, m := range req[1 : len(req)-1] {
			b.out.write(m.Header.Type, m.Header.Flags, m.Data)
		}
	}
	return []netlink.Message{{
		Header: netlink.Header{Type: netlink.Error},
		Data:   make([]byte, 4+16), // error 0 and the request's header: an acknowledgement
	}}, nil
}

// Add queues a message encoded elsewhere, after everything queued on Conn so far.
func (b *Batch) Add(m netlink.Message) error {
	if err := b.conn.Flush(); err != nil {
		return fmt.Errorf("encode the batch: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out.write(m.Header.Type, m.Header.Flags, m.Data)
	return nil
}

// Send has the library encode the batch and sends it to the kernel of the current network
// namespace in one transaction. It reports every message the kernel refused, by kind and
// object name; the kernel then applied none of the batch. It sends on s, or with s nil on
// a socket of its own.
func (b *Batch) Send(s *Socket) error {
	msgs, err := b.take()
	if err != nil || msgs == nil {
		return err
	}
	if s == nil {
		fd, err := openSocket()
		if err != nil {
			return err
		}
		defer closeLater(fd)
		return send(fd, msgs)
	}
	return s.send(msgs)
}

// Commit sends the batch as a sync's one transaction, as Send does, and returns the time
// that took: the kernel's time over the batch. full says which kind of sync the batch is
// (a full one, or a partial one over what the last sync left), for its error.
func (b *Batch) Commit(s *Socket, full bool) (time.Duration, error) {
	start := time.Now()
	err := b.Send(s)
	took := time.Since(start)
	if err != nil {
		kind := "partial"
		if full {
			kind = "full"
		}
		return took, fmt.Errorf("nftables batch (%s): %w", kind, err)
	}
	return took, nil
}

// take ends the batch: its messages in order between a begin and an end message, only the
// last before the end asking for an acknowledgement; nil when nothing was queued.
func (b *Batch) take() (*encoded, error) {
	if err := b.conn.Flush(); err != nil {
		return nil, fmt.Errorf("encode the batch: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent {
		return nil, errors.New("nlbatch: batch already sent")
	}
	b.sent = true
	out := b.out
	b.out = encoded{}
	if out.n == 0 {
		return nil, nil
	}
	out.end()
	return &out, nil
}

// encoded is a batch laid out as the kernel reads it: the messages numbered from 1 (the
// batch begin) with headers of their own, in chunks that sendmsg gathers (at most
// maxChunks, UIO_MAXIOV).
type encoded struct {
	chunks [][]byte
	size   int // bytes in all chunks
	n      int // messages written; the last one's sequence number
	// lastChunk and lastOff locate the header of the last message written.
	lastChunk, lastOff int
}

const (
	minChunk  = 64 << 10
	maxChunk  = 8 << 20
	maxChunks = 1024
)

// write appends a message, numbered next, asking for neither acknowledgement nor echo
// (google/nftables asks for an echo of every rule, to learn its handle, which would queue
// a copy of each rule for edgegate to read; it uses none). The batch begin comes first.
func (e *encoded) write(typ netlink.HeaderType, flags netlink.HeaderFlags, data []byte) {
	if e.n == 0 && typ != netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) {
		begin := batchMessage(unix.NFNL_MSG_BATCH_BEGIN)
		e.write(begin.Header.Type, begin.Header.Flags, begin.Data)
	}
	n := 16 + len(data)
	cur := len(e.chunks) - 1
	if cur < 0 || cap(e.chunks[cur])-len(e.chunks[cur]) < align(n) {
		// Chunks grow with the batch: a one-rule sync takes 64 KiB, a full one 8 MiB
		// chunks, and a batch of 8 GiB still fits maxChunks.
		e.chunks = append(e.chunks, make([]byte, 0, max(align(n), min(max(e.size, minChunk), maxChunk))))
		cur++
	}
	c := e.chunks[cur]
	e.lastChunk, e.lastOff = cur, len(c)
	e.n++
	c = binary.NativeEndian.AppendUint32(c, uint32(n))
	c = binary.NativeEndian.AppendUint16(c, uint16(typ))
	c = binary.NativeEndian.AppendUint16(c, uint16(flags&^(netlink.Acknowledge|netlink.Echo)))
	c = binary.NativeEndian.AppendUint32(c, uint32(e.n))
	c = binary.NativeEndian.AppendUint32(c, 0)
	c = append(c, data...)
	c = append(c, make([]byte, align(n)-n)...)
	e.chunks[cur] = c
	e.size += align(n)
}

// end has the last message ask for the acknowledgement that says the batch was read to
// its end, and appends the batch end.
func (e *encoded) end() {
	flags := e.chunks[e.lastChunk][e.lastOff+6:]
	binary.NativeEndian.PutUint16(flags, binary.NativeEndian.Uint16(flags)|uint16(netlink.Acknowledge))
	end := batchMessage(unix.NFNL_MSG_BATCH_END)
	e.write(end.Header.Type, end.Header.Flags, end.Data)
}

// last is the sequence number of the message that asks for the acknowledgement.
func (e *encoded) last() uint32 { return uint32(e.n - 1) }

// message returns the message numbered seq, nil when there is none.
func (e *encoded) message(seq uint32) *netlink.Message {
	var i uint32
	for _, c := range e.chunks {
		for len(c) >= 16 {
			n := int(binary.NativeEndian.Uint32(c))
			if i++; i == seq {
				return &netlink.Message{
					Header: netlink.Header{Type: netlink.HeaderType(binary.NativeEndian.Uint16(c[4:])),
						Flags: netlink.HeaderFlags(binary.NativeEndian.Uint16(c[6:])), Sequence: seq},
					Data: c[16:n],
				}
			}
			c = c[min(align(n), len(c)):]
		}
	}
	return nil
}

// batchMessage is the begin or end of a batch of nftables messages.
func batchMessage(typ uint16) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}, // res_id, big-endian
	}
}

// Socket is a netfilter socket kept open for the batches of one backend, in the network
// namespace it was opened in. The kernel's release of a socket that just committed a
// batch waits until the batch's old objects are freed, an RCU grace period, and the next
// commit waits for that too: a sync of one endpoint at 1,000 Services took 21 ms, 12 of
// them closing its socket. A socket kept open is never released between batches.
//
// The zero Socket opens on its first batch, in the network namespace of that call, and
// closes when it is garbage. A Socket must not be copied.
type Socket struct {
	mu   sync.Mutex
	open *socketFD
}

type socketFD struct{ fd int }

func (s *Socket) send(msgs *encoded) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		fd, err := openSocket()
		if err != nil {
			return err
		}
		s.open = &socketFD{fd}
		runtime.AddCleanup(s.open, func(fd int) { unix.Close(fd) }, fd)
	}
	err := send(s.open.fd, msgs)
	if err != nil {
		// Replies the failure left unread would answer the next batch: start afresh.
		s.open = nil
	}
	return err
}

func openSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink bind: %w", err)
	}
	if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, receiveBuffer); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink receive buffer: %w", err)
	}
	for _, opt := range []int{unix.NETLINK_CAP_ACK, unix.NETLINK_EXT_ACK} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, opt, 1); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("netlink socket option %d: %w", opt, err)
		}
	}
	return fd, nil
}

// Receive buffer: errors carry only the refused message's header (NETLINK_CAP_ACK) and the
// kernel's explanation; when more are refused than fit, the batch failed anyway.
const receiveBuffer = 8 << 20

// maxErrors bounds the refused messages an error lists: one mistake can refuse thousands.
const maxErrors = 5

// closeLater closes a one-batch socket without waiting for its release (see Socket).
func closeLater(fd int) { go unix.Close(fd) }

// send writes the batch in one sendmsg on fd and reads the replies the kernel queued
// while processing it: all of them, so fd is empty for the next batch.
func send(fd int, msgs *encoded) error {
	// The batch must fit the send buffer whole; FORCE (root) passes net.core.wmem_max.
	if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, msgs.size+4096); err != nil {
		return fmt.Errorf("netlink send buffer of %d bytes: %w", msgs.size, err)
	}
	bufs := msgs.chunks
	if len(bufs) > maxChunks {
		bufs = [][]byte{slices.Concat(bufs...)}
	}
	if _, err := unix.SendmsgBuffers(fd, bufs, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0); err != nil {
		return fmt.Errorf("send the batch (%d messages, %d bytes): %w", msgs.n, msgs.size, err)
	}
	// The kernel processed the batch inside sendmsg: every reply is queued by now.
	return readReplies(fd, msgs)
}

func setBuffer(fd, force, plain, size int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size); err == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

func align(n int) int { return (n + 3) &^ 3 }

// readReplies drains the socket without waiting: the acknowledgement of message last, and
// an error for each refused message (or for the batch as a whole, numbered 1: the kernel
// ran out of memory or could not commit).
func readReplies(fd int, msgs *encoded) error {
	last := msgs.last()
	var errs []string
	acked, overflow, refused := false, false, 0
	rbuf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, rbuf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) {
			break
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOBUFS) {
			// Some replies were dropped; those still queued follow.
			overflow = true
			continue
		}
		if err != nil {
			return fmt.Errorf("read the kernel's replies: %w", err)
		}
		replies, err := parse(rbuf[:n])
		if err != nil {
			return err
		}
		for _, r := range replies {
			if r.code == 0 {
				acked = acked || r.seq == last
				continue
			}
			if refused++; len(errs) < maxErrors {
				errs = append(errs, describe(msgs, r))
			}
		}
	}
	if refused > len(errs) {
		errs = append(errs, fmt.Sprintf("and %d more", refused-len(errs)))
	}
	if overflow {
		errs = append(errs, "and more than the receive buffer held")
	}
	switch {
	case len(errs) > 0:
		return fmt.Errorf("the kernel refused the batch: %s", strings.Join(errs, "; "))
	case !acked:
		return fmt.Errorf("the kernel did not acknowledge the batch's last message (%d messages)", msgs.n)
	}
	return nil
}

// reply is one NLMSG_ERROR message: code 0 acknowledges.
type reply struct {
	seq    uint32
	code   int32
	reason string // NLMSGERR_ATTR_MSG
}

func parse(b []byte) ([]reply, error) {
	var out []reply
	for len(b) >= 16 {
		n := int(binary.NativeEndian.Uint32(b))
		if n < 16 || n > len(b) {
			return nil, fmt.Errorf("netlink reply: bad length %d", n)
		}
		typ := binary.NativeEndian.Uint16(b[4:])
		flags := binary.NativeEndian.Uint16(b[6:])
		seq := binary.NativeEndian.Uint32(b[8:])
		body := b[16:n]
		b = b[min(align(n), len(b)):]
		if typ != unix.NLMSG_ERROR || len(body) < 4+16 {
			continue
		}
		r := reply{seq: seq, code: int32(binary.NativeEndian.Uint32(body))}
		// With NETLINK_CAP_ACK the request's header follows the code, then the
		// extended-ack attributes (NLM_F_ACK_TLVS).
		if flags&unix.NLM_F_ACK_TLVS != 0 {
			r.reason = extackMessage(body[4+16:])
		}
		out = append(out, r)
	}
	return out, nil
}

// extackMessage finds NLMSGERR_ATTR_MSG among netlink attributes.
func extackMessage(b []byte) string {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:])
		if n < 4 || n > len(b) {
			return ""
		}
		if typ&0x3fff == unix.NLMSGERR_ATTR_MSG {
			return strings.TrimRight(string(b[4:n]), "\x00")
		}
		b = b[min(align(n), len(b)):]
	}
	return ""
}

// describe names the message an error refers to: its kind and the object it names.
func describe(msgs *encoded, r reply) string {
	errno := unix.Errno(-r.code)
	what := "the batch"
	if m := msgs.message(r.seq); m != nil && r.seq > 1 && int(r.seq) < msgs.n {
		what = Describe(*m)
	}
	s := fmt.Sprintf("%s: %v", what, errno)
	if r.reason != "" {
		s += " (" + r.reason + ")"
	}
	return s
}

// Package nbddisk is a test-only disk with a volatile write cache, served over NBD on a
// unix socket, so that a QEMU guest's power cut can lose what a real device loses. Writes
// stay in memory until the guest flushes (NBD_CMD_FLUSH) or writes with FUA; reads see
// them. At a cut the server stops answering and a Policy picks which unflushed writes reach
// the image file, whole, torn at sector granularity, or not at all, and in which order;
// the file is then what the device holds at the next power-on.
//
// The server speaks the fixed newstyle handshake (NBD_OPT_GO, NBD_OPT_INFO,
// NBD_OPT_EXPORT_NAME, NBD_OPT_LIST) and simple replies, serves one export named "" and
// advertises NBD_FLAG_SEND_FLUSH and NBD_FLAG_SEND_FUA, so QEMU's NBD client passes the
// guest's flushes and FUA writes through.
package nbddisk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// ErrOff is returned by Cut and CutWhen when the power is already off, and by PowerOn
// when it is already on or the disk is closed.
var ErrOff = errors.New("nbd: the disk's power is off")

// Options configure a Disk.
type Options struct {
	// Socket is the unix socket to listen on; empty makes disk.sock in a new temporary
	// directory, removed by Close. A path QEMU's -blockdev takes must hold no comma.
	Socket string
	// Logger gets connections, protocol errors and cuts; nil discards them.
	Logger *slog.Logger
	// Record keeps every write and flush in order (Trace), so that a test can rebuild, with
	// Replay, the disk a cut at any moment would have left, without running the guest again.
	Record bool
}

// Stats count what the disk did since its last power-on.
type Stats struct {
	Reads, Writes, FUAWrites, Flushes uint64
	// PendingWrites and PendingBytes are what sits in the volatile cache now (bytes of
	// sectors not yet superseded by a FUA write).
	PendingWrites int
	PendingBytes  int64
	// Connections are the clients connected now.
	Connections int
}

// Disk is a running NBD server for one image file.
type Disk struct {
	socket string
	tmpDir string
	log    *slog.Logger
	file   *os.File
	size   int64

	mu      sync.Mutex
	on      bool
	closed  bool
	cache   *cache
	stats   Stats
	changed chan struct{} // closed and replaced on every change of stats or power
	ln      net.Listener
	conns   map[net.Conn]bool
	trigger *trigger
	serving sync.WaitGroup // the accept loop and the connections of this power cycle
	record  bool
	trace   []Op
}

// trigger is a pending CutWhen: checked after every command, under the lock.
type trigger struct {
	cond   func(Stats) bool
	policy Policy
	done   chan cutResult
}

type cutResult struct {
	report *Report
	err    error
}

// Start serves the raw image file (its size a whole number of sectors) and powers the
// disk on.
func Start(image string, opts Options) (*Disk, error) {
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("nbd: %w", err)
	}
	st, err := f.Stat()
	if err != nil || st.Size()%SectorSize != 0 || st.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("nbd: image %s: want a whole number of %d-byte sectors (%v)", image, SectorSize, err)
	}
	d := &Disk{socket: opts.Socket, log: opts.Logger, file: f, size: st.Size(), changed: make(chan struct{}), record: opts.Record}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.socket == "" {
		if d.tmpDir, err = os.MkdirTemp("", "nbddisk-"); err != nil {
			f.Close()
			return nil, fmt.Errorf("nbd: %w", err)
		}
		d.socket = filepath.Join(d.tmpDir, "disk.sock")
	}
	if err := d.PowerOn(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Socket is the unix socket the disk listens on.
func (d *Disk) Socket() string { return d.socket }

// Size is the export's size in bytes.
func (d *Disk) Size() int64 { return d.size }

// PowerOn starts serving again after a cut, with an empty cache and zeroed Stats.
func (d *Disk) PowerOn() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on || d.closed {
		return fmt.Errorf("nbd: power on: %w", ErrOff)
	}
	os.Remove(d.socket) // a socket file a killed server left behind
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		return fmt.Errorf("nbd: %w", err)
	}
	d.on, d.ln, d.conns = true, ln, map[net.Conn]bool{}
	d.cache = newCache(d.file, d.size)
	d.stats = Stats{}
	d.changedLocked()
	d.serving.Add(1)
	go d.accept(ln)
	return nil
}

// Stats returns the counters now.
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Pending returns the writes in the volatile cache, oldest first (their Data is shared:
// read only).
func (d *Disk) Pending() []PendingWrite {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.on {
		return nil
	}
	return d.cache.snapshot()
}

// WaitFor waits until cond holds for the disk's Stats, or ctx ends. Cond runs with the
// disk's lock held: it must not call the Disk.
func (d *Disk) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		d.mu.Lock()
		ok, changed := cond(d.stats), d.changed
		d.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("nbd: waiting for the disk: %w (stats %+v)", ctx.Err(), d.Stats())
		}
	}
}

// Cut is a power cut now: the server drops its connections and stops listening, the writes
// the policy keeps reach the file and the rest are lost. The disk stays off until PowerOn.
// A policy that names a write or sector that does not exist keeps nothing and Cut says so.
func (d *Disk) Cut(policy Policy) (*Report, error) {
	d.mu.Lock()
	if !d.on {
		d.mu.Unlock()
		return nil, fmt.Errorf("nbd: cut: %w", ErrOff)
	}
	r, err := d.cutLocked(policy)
	d.mu.Unlock()
	d.serving.Wait()
	return r, err
}

// CutWhen cuts the power at the first moment cond holds for the Stats: it is checked now
// and after each command the disk processes, before that command's reply is sent, so no
// command runs between the moment and the cut (cutting when Writes reaches n loses or
// keeps the nth write by the policy, and its writer never hears back). It returns when the
// cut is done, or fails when ctx ends first, leaving the power on.
func (d *Disk) CutWhen(ctx context.Context, cond func(Stats) bool, policy Policy) (*Report, error) {
	d.mu.Lock()
	switch {
	case !d.on:
		d.mu.Unlock()
		return nil, fmt.Errorf("nbd: cut: %w", ErrOff)
	case d.trigger != nil:
		d.mu.Unlock()
		return nil, errors.New("nbd: cut: another CutWhen is waiting")
	case cond(d.stats):
		r, err := d.cutLocked(policy)
		d.mu.Unlock()
		d.serving.Wait()
		return r, err
	}
	t := &trigger{cond: cond, policy: policy, done: make(chan cutResult, 1)}
	d.trigger = t
	d.mu.Unlock()
	select {
	case res := <-t.done:
		d.serving.Wait()
		return res.report, res.err
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case res := <-t.done: // the cut came as ctx ended
		return res.report, res.err
	default:
		d.trigger = nil
		return nil, fmt.Errorf("nbd: cut: %w (stats %+v)", ctx.Err(), d.stats)
	}
}

// Close stops the disk. A disk still powered on first writes its cache to the file, as a
// device does at an orderly power-off; after a cut there is nothing left to write.
func (d *Disk) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var err error
	if d.on {
		err = d.cache.flush()
		d.offLocked()
	}
	d.mu.Unlock()
	d.serving.Wait()
	err = errors.Join(err, d.file.Close())
	if d.tmpDir != "" {
		err = errors.Join(err, os.RemoveAll(d.tmpDir))
	}
	return err
}

// cutLocked cuts the power with d.mu held.
func (d *Disk) cutLocked(policy Policy) (*Report, error) {
	d.offLocked()
	r, err := d.cache.cut(policy)
	d.stats.PendingWrites, d.stats.PendingBytes = 0, 0
	d.log.Info("power cut", "pending", len(r.Outcomes), "kept", r.Count(Kept), "torn", r.Count(Torn), "lost", r.Count(Lost), "err", err)
	return r, err
}

// offLocked stops serving: no command is processed after it (each checks d.on under the
// lock), and closing the connections ends their goroutines.
func (d *Disk) offLocked() {
	d.on = false
	d.ln.Close()
	for c := range d.conns {
		c.Close()
	}
	clear(d.conns)
	d.stats.Connections = 0
	d.changedLocked()
}

func (d *Disk) changedLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *Disk) accept(ln net.Listener) {
	defer d.serving.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed at a cut or Close
		}
		d.mu.Lock()
		if !d.on {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.conns[c] = true
		d.stats.Connections++
		d.changedLocked()
		d.serving.Add(1)
		d.mu.Unlock()
		go d.serve(c)
	}
}

// serve runs one client connection: handshake, then commands until the client
// disconnects or the power goes.
func (d *Disk) serve(c net.Conn) {
	defer d.serving.Done()
	log := d.log.With("conn", fmt.Sprintf("%p", c))
	log.Debug("connected")
	r := bufio.NewReader(c)
	err := d.handshake(r, c)
	if err == nil {
		err = d.transmit(r, c)
	}
	c.Close()
	d.mu.Lock()
	if d.conns[c] {
		delete(d.conns, c)
		d.stats.Connections--
		d.changedLocked()
	}
	d.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errDisconnect) && !errors.Is(err, ErrOff) {
		log.Warn("connection ended", "err", err)
		return
	}
	log.Debug("disconnected", "err", err)
}

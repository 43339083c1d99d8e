package nbddisk

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// errDisconnect ends a session the client ended politely (NBD_OPT_ABORT, NBD_CMD_DISC).
var errDisconnect = errors.New("nbd: client disconnected")

// handshake runs the fixed newstyle negotiation until the client picks the export; it
// returns nil when the transmission phase begins.
func (d *Disk) handshake(r *bufio.Reader, w io.Writer) error {
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], magicInit)
	binary.BigEndian.PutUint64(hello[8:], magicOpt)
	binary.BigEndian.PutUint16(hello[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := w.Write(hello[:]); err != nil {
		return err
	}
	var cflags [4]byte
	if _, err := io.ReadFull(r, cflags[:]); err != nil {
		return err
	}
	clientFlags := binary.BigEndian.Uint32(cflags[:])
	if clientFlags&^(flagFixedNewstyle|flagNoZeroes) != 0 {
		return fmt.Errorf("%w: client flags %#x", errProtocol, clientFlags)
	}
	for {
		o, err := readOption(r)
		if err != nil {
			return err
		}
		switch o.code {
		case optExportName:
			if len(o.data) != 0 {
				return fmt.Errorf("nbd: client asked for export %q; the only one is \"\"", o.data)
			}
			reply := make([]byte, 10, 10+124)
			binary.BigEndian.PutUint64(reply[0:], uint64(d.size))
			binary.BigEndian.PutUint16(reply[8:], transmitFlags)
			if clientFlags&flagNoZeroes == 0 {
				reply = append(reply, make([]byte, 124)...)
			}
			_, err := w.Write(reply)
			return err
		case optAbort:
			_ = writeOptionReply(w, o.code, repAck, nil)
			return errDisconnect
		case optList:
			err = d.list(w, o)
		case optInfo, optGo:
			var entered bool
			if entered, err = d.info(w, o); entered {
				return err
			}
		default:
			err = writeOptionReply(w, o.code, repErrUnsup, nil)
		}
		if err != nil {
			return err
		}
	}
}

// list answers NBD_OPT_LIST with the one export.
func (d *Disk) list(w io.Writer, o option) error {
	if len(o.data) != 0 {
		return writeOptionReply(w, o.code, repErrInvalid, nil)
	}
	if err := writeOptionReply(w, o.code, repServer, make([]byte, 4)); err != nil {
		return err
	}
	return writeOptionReply(w, o.code, repAck, nil)
}

// info answers NBD_OPT_INFO and NBD_OPT_GO; entered says a GO succeeded.
func (d *Disk) info(w io.Writer, o option) (entered bool, err error) {
	name, infos, err := parseInfoRequest(o.data)
	if err != nil {
		return false, writeOptionReply(w, o.code, repErrInvalid, nil)
	}
	if name != "" {
		return false, writeOptionReply(w, o.code, repErrUnknown, []byte("the only export is \"\""))
	}
	if err := writeOptionReply(w, o.code, repInfo, exportInfo(d.size)); err != nil {
		return false, err
	}
	if slices.Contains(infos, infoBlockSize) {
		if err := writeOptionReply(w, o.code, repInfo, blockSizeInfo()); err != nil {
			return false, err
		}
	}
	if err := writeOptionReply(w, o.code, repAck, nil); err != nil {
		return false, err
	}
	return o.code == optGo, nil
}

// transmit serves commands until the client disconnects or the power goes. Commands run
// one at a time, in the order they arrive, each under the disk's lock.
func (d *Disk) transmit(r *bufio.Reader, w io.Writer) error {
	for {
		req, err := readRequest(r)
		if err != nil {
			return err
		}
		var payload []byte
		if req.typ == cmdWrite {
			if req.length > maxPayload {
				return fmt.Errorf("%w: write of %d bytes", errProtocol, req.length)
			}
			payload = make([]byte, req.length)
			if _, err := io.ReadFull(r, payload); err != nil {
				return err
			}
		}
		if req.typ == cmdDisc {
			return errDisconnect
		}
		errno, data, err := d.command(req, payload)
		if err != nil {
			return err
		}
		if err := writeReply(w, req.handle, errno, data); err != nil {
			return err
		}
	}
}

// command runs one command under the lock and returns the reply's error number and data.
// An error means the power went: no reply.
func (d *Disk) command(req request, payload []byte) (errno uint32, data []byte, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.on {
		return 0, nil, ErrOff
	}
	if req.flags&^cmdFlagFUA != 0 {
		return errInvalid, nil, nil
	}
	end := req.offset + uint64(req.length)
	switch {
	case req.typ == cmdRead && (end > uint64(d.size) || req.length > maxPayload):
		return errInvalid, nil, nil
	case req.typ == cmdWrite && end > uint64(d.size):
		return errNoSpace, nil, nil
	}
	var ioErr error
	switch req.typ {
	case cmdRead:
		d.stats.Reads++
		data, ioErr = d.cache.read(int64(req.offset), int(req.length))
	case cmdWrite:
		fua := req.flags&cmdFlagFUA != 0
		d.stats.Writes++
		if fua {
			d.stats.FUAWrites++
		}
		ioErr = d.cache.write(int64(req.offset), payload, fua)
		if d.record {
			d.trace = append(d.trace, Op{Off: int64(req.offset), Data: bytes.Clone(payload), FUA: fua})
		}
	case cmdFlush:
		d.stats.Flushes++
		ioErr = d.cache.flush()
		if d.record {
			d.trace = append(d.trace, Op{Flush: true})
		}
	default:
		return errInvalid, nil, nil
	}
	d.stats.PendingWrites, d.stats.PendingBytes = len(d.cache.pending), d.cache.bytes
	d.changedLocked()
	if ioErr != nil {
		d.log.Error("command failed", "type", req.typ, "offset", req.offset, "length", req.length, "err", ioErr)
		return errIO, nil, nil
	}
	if t := d.trigger; t != nil && t.cond(d.stats) {
		d.trigger = nil
		r, err := d.cutLocked(t.policy)
		t.done <- cutResult{r, err}
		return 0, nil, ErrOff
	}
	return 0, data, nil
}

package nbddisk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The NBD protocol's numbers (github.com/NetworkBlockDevice/nbd, doc/proto.md): the fixed
// newstyle handshake, the options this server answers and the simple replies of the
// transmission phase.
const (
	magicInit     = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt      = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply = 0x3e889045565a9
	magicRequest  = 0x25609513
	magicReply    = 0x67446698

	flagFixedNewstyle = 1 << 0 // handshake flags, and the client's
	flagNoZeroes      = 1 << 1

	optExportName = 1
	optAbort      = 2
	optList       = 3
	optInfo       = 6
	optGo         = 7

	repAck        = 1
	repServer     = 2
	repInfo       = 3
	repErrUnsup   = 1<<31 + 1
	repErrInvalid = 1<<31 + 3
	repErrUnknown = 1<<31 + 6

	infoExport    = 0
	infoBlockSize = 3

	// Transmission flags: FLUSH and FUA make the client treat the export as a disk with a
	// volatile write cache. No TRIM, WRITE_ZEROES or multi-connection: clients then never
	// send those.
	tflagHasFlags  = 1 << 0
	tflagSendFlush = 1 << 2
	tflagSendFUA   = 1 << 3
	transmitFlags  = tflagHasFlags | tflagSendFlush | tflagSendFUA

	cmdRead  = 0
	cmdWrite = 1
	cmdDisc  = 2
	cmdFlush = 3

	cmdFlagFUA = 1 << 0

	errIO      = 5
	errInvalid = 22
	errNoSpace = 28
)

// Size constraints sent with NBD_INFO_BLOCK_SIZE: a client that asks for them (QEMU does)
// aligns its requests to whole sectors itself.
const (
	minBlock       = SectorSize
	preferredBlock = 4096
	maxPayload     = 32 << 20
	maxOptionData  = 64 << 10
)

// errProtocol marks a peer that broke the protocol: the connection is dropped.
var errProtocol = errors.New("nbd: protocol violation")

// request is one transmission-phase request header.
type request struct {
	flags  uint16
	typ    uint16
	handle uint64
	offset uint64
	length uint32
}

func readRequest(r io.Reader) (request, error) {
	var b [28]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return request{}, err
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != magicRequest {
		return request{}, fmt.Errorf("%w: request magic %#x", errProtocol, m)
	}
	return request{
		flags:  binary.BigEndian.Uint16(b[4:]),
		typ:    binary.BigEndian.Uint16(b[6:]),
		handle: binary.BigEndian.Uint64(b[8:]),
		offset: binary.BigEndian.Uint64(b[16:]),
		length: binary.BigEndian.Uint32(b[24:]),
	}, nil
}

// writeReply sends a simple reply, with data after it for a successful read.
func writeReply(w io.Writer, handle uint64, errno uint32, data []byte) error {
	b := make([]byte, 16, 16+len(data))
	binary.BigEndian.PutUint32(b[0:], magicReply)
	binary.BigEndian.PutUint32(b[4:], errno)
	binary.BigEndian.PutUint64(b[8:], handle)
	_, err := w.Write(append(b, data...))
	return err
}

// option is one option the client sends during the handshake.
type option struct {
	code uint32
	data []byte
}

func readOption(r io.Reader) (option, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return option{}, err
	}
	if m := binary.BigEndian.Uint64(b[0:]); m != magicOpt {
		return option{}, fmt.Errorf("%w: option magic %#x", errProtocol, m)
	}
	o := option{code: binary.BigEndian.Uint32(b[8:])}
	n := binary.BigEndian.Uint32(b[12:])
	if n > maxOptionData {
		return option{}, fmt.Errorf("%w: option %d carries %d bytes", errProtocol, o.code, n)
	}
	o.data = make([]byte, n)
	if _, err := io.ReadFull(r, o.data); err != nil {
		return option{}, err
	}
	return o, nil
}

func writeOptionReply(w io.Writer, code, typ uint32, data []byte) error {
	b := make([]byte, 20, 20+len(data))
	binary.BigEndian.PutUint64(b[0:], magicOptReply)
	binary.BigEndian.PutUint32(b[8:], code)
	binary.BigEndian.PutUint32(b[12:], typ)
	binary.BigEndian.PutUint32(b[16:], uint32(len(data)))
	_, err := w.Write(append(b, data...))
	return err
}

// exportInfo is NBD_INFO_EXPORT's payload: size and transmission flags.
func exportInfo(size int64) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b[0:], infoExport)
	binary.BigEndian.PutUint64(b[2:], uint64(size))
	binary.BigEndian.PutUint16(b[10:], transmitFlags)
	return b
}

func blockSizeInfo() []byte {
	b := make([]byte, 14)
	binary.BigEndian.PutUint16(b[0:], infoBlockSize)
	binary.BigEndian.PutUint32(b[2:], minBlock)
	binary.BigEndian.PutUint32(b[6:], preferredBlock)
	binary.BigEndian.PutUint32(b[10:], maxPayload)
	return b
}

// parseInfoRequest reads NBD_OPT_INFO's and NBD_OPT_GO's data: the export name and the
// information types the client asks for.
func parseInfoRequest(data []byte) (name string, infos []uint16, err error) {
	if len(data) < 6 {
		return "", nil, fmt.Errorf("%w: %d bytes of NBD_OPT_GO data", errProtocol, len(data))
	}
	n := binary.BigEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-6) {
		return "", nil, fmt.Errorf("%w: name of %d bytes in %d", errProtocol, n, len(data))
	}
	name = string(data[4 : 4+n])
	rest := data[4+n:]
	count := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*count {
		return "", nil, fmt.Errorf("%w: %d information requests in %d bytes", errProtocol, count, len(rest)-2)
	}
	for i := range count {
		infos = append(infos, binary.BigEndian.Uint16(rest[2+2*i:]))
	}
	return name, infos, nil
}

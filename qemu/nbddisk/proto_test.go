package nbddisk

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The parts of the protocol QEMU's client does not use (NBD_OPT_EXPORT_NAME, LIST,
// unknown options, requests out of range), spoken by hand.

func TestHandshakeByExportNameAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, 8*SectorSize), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Start(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	be := binary.BigEndian
	read := func(n int) []byte {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	send := func(parts ...any) {
		t.Helper()
		for _, p := range parts {
			if err := binary.Write(c, be, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// optionReply reads one option reply and returns its type and data.
	optionReply := func(code uint32) (uint32, []byte) {
		t.Helper()
		h := read(20)
		if be.Uint64(h) != magicOptReply || be.Uint32(h[8:]) != code {
			t.Fatalf("option reply header %x for option %d", h, code)
		}
		return be.Uint32(h[12:]), read(int(be.Uint32(h[16:])))
	}

	hello := read(18)
	if be.Uint64(hello) != magicInit || be.Uint64(hello[8:]) != magicOpt || be.Uint16(hello[16:]) != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("hello %x", hello)
	}
	send(uint32(flagFixedNewstyle)) // zeroes wanted after EXPORT_NAME's reply

	send(uint64(magicOpt), uint32(optList), uint32(0))
	if typ, data := optionReply(optList); typ != repServer || be.Uint32(data) != 0 {
		t.Errorf("LIST: reply %#x %x, want one export named \"\"", typ, data)
	}
	if typ, _ := optionReply(optList); typ != repAck {
		t.Errorf("LIST ends with %#x", typ)
	}
	send(uint64(magicOpt), uint32(8), uint32(0)) // NBD_OPT_STRUCTURED_REPLY
	if typ, _ := optionReply(8); typ != repErrUnsup {
		t.Errorf("structured replies: %#x, want NBD_REP_ERR_UNSUP", typ)
	}
	send(uint64(magicOpt), uint32(optInfo), uint32(4+4+2), uint32(4), []byte("nope"), uint16(0))
	if typ, _ := optionReply(optInfo); typ != repErrUnknown {
		t.Errorf("INFO for an unknown export: %#x, want NBD_REP_ERR_UNKNOWN", typ)
	}

	send(uint64(magicOpt), uint32(optExportName), uint32(0))
	export := read(10 + 124)
	if be.Uint64(export) != 8*SectorSize || be.Uint16(export[8:]) != transmitFlags {
		t.Fatalf("EXPORT_NAME reply %x", export[:10])
	}
	request := func(flags, typ uint16, handle, off uint64, length uint32) {
		t.Helper()
		send(uint32(magicRequest), flags, typ, handle, off, length)
	}
	reply := func(handle uint64) uint32 {
		t.Helper()
		h := read(16)
		if be.Uint32(h) != magicReply || be.Uint64(h[8:]) != handle {
			t.Fatalf("reply %x for handle %d", h, handle)
		}
		return be.Uint32(h[4:])
	}
	request(0, cmdRead, 1, 8*SectorSize-512, 1024)
	if e := reply(1); e != errInvalid {
		t.Errorf("read past the end: error %d, want EINVAL", e)
	}
	request(0, cmdWrite, 2, 8*SectorSize, 512)
	send(make([]byte, 512))
	if e := reply(2); e != errNoSpace {
		t.Errorf("write past the end: error %d, want ENOSPC", e)
	}
	request(0, 4, 3, 0, 512) // NBD_CMD_TRIM, not advertised
	if e := reply(3); e != errInvalid {
		t.Errorf("trim: error %d, want EINVAL", e)
	}
	request(cmdFlagFUA, cmdWrite, 4, 100, 3)
	send([]byte("abc"))
	if e := reply(4); e != 0 {
		t.Fatalf("FUA write: error %d", e)
	}
	request(0, cmdRead, 5, 99, 5)
	if e, data := reply(5), read(5); e != 0 || string(data) != "\x00abc\x00" {
		t.Errorf("read back: error %d, %q", e, data)
	}
	request(0, cmdDisc, 6, 0, 0)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after NBD_CMD_DISC: %v, want the server to close", err)
	}
	if st := d.Stats(); st.Writes != 1 || st.FUAWrites != 1 || st.Reads != 1 {
		t.Errorf("stats %+v: the refused requests count as nothing", st)
	}
}

package initramfs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// fakeELF returns a minimal 64-bit little-endian ELF file: a .modinfo section holding the
// given key=value entries (a kernel module as far as the builder cares) and, when interp
// is set, a PT_INTERP program header (a dynamically linked program).
func fakeELF(t *testing.T, machine elf.Machine, modinfo []string, interp bool) []byte {
	t.Helper()
	const ehsize, phsize, shsize = 64, 56, 64
	interpStr := "/lib64/ld-linux-x86-64.so.2\x00"
	info := strings.Join(modinfo, "\x00") + "\x00"
	shstr := "\x00.modinfo\x00.shstrtab\x00"
	nph := 0
	if interp {
		nph = 1
	}
	interpOff := ehsize + phsize*nph
	infoOff := interpOff + len(interpStr)*nph
	shstrOff := infoOff + len(info)
	shOff := (shstrOff + len(shstr) + 7) &^ 7

	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_REL), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Shoff: uint64(shOff), Ehsize: ehsize, Shentsize: shsize, Shnum: 3, Shstrndx: 2,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if interp {
		hdr.Type = uint16(elf.ET_EXEC)
		hdr.Phoff, hdr.Phentsize, hdr.Phnum = ehsize, phsize, 1
	}
	write := func(v any) {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	write(hdr)
	if interp {
		write(elf.Prog64{Type: uint32(elf.PT_INTERP), Off: uint64(interpOff), Filesz: uint64(len(interpStr)), Memsz: uint64(len(interpStr)), Align: 1})
		b.WriteString(interpStr)
	}
	b.WriteString(info)
	b.WriteString(shstr)
	b.Write(make([]byte, shOff-b.Len()))
	write(elf.Section64{})
	write(elf.Section64{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: uint64(infoOff), Size: uint64(len(info)), Addralign: 1})
	write(elf.Section64{Name: 10, Type: uint32(elf.SHT_STRTAB), Off: uint64(shstrOff), Size: uint64(len(shstr)), Addralign: 1})
	return b.Bytes()
}

// writeModule writes a fake module under dir at rel, compressed as rel's suffix says.
func writeModule(t *testing.T, dir, rel string, modinfo ...string) []byte {
	t.Helper()
	plain := fakeELF(t, elf.EM_X86_64, modinfo, false)
	data := plain
	switch {
	case strings.HasSuffix(rel, ".xz"):
		var buf bytes.Buffer
		w, err := xz.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(plain); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data = buf.Bytes()
	case strings.HasSuffix(rel, ".zst"):
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		data = enc.EncodeAll(plain, nil)
		enc.Close()
	}
	writeFile(t, filepath.Join(dir, rel), data)
	return plain
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFakeELFParses(t *testing.T) {
	mi, err := parseModinfo(fakeELF(t, elf.EM_X86_64, []string{"depends=a,b", "softdep=pre: c d post: e", "alias=x", "name=m"}, true))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(mi.depends, ",") != "a,b" || strings.Join(mi.pre, ",") != "c,d" ||
		strings.Join(mi.post, ",") != "e" || strings.Join(mi.aliases, ",") != "x" {
		t.Fatalf("parseModinfo = %+v", mi)
	}
}

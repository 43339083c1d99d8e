package initramfs

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// modinfo is the part of a module's .modinfo ELF section the load order needs.
type modinfo struct {
	// depends are the modules whose symbols this one uses (the `depends=` entry).
	depends []string
	// pre and post are the soft dependencies: modules to load before and after this one
	// although no symbol ties them (`softdep=pre: crc32c post: ...`).
	pre, post []string
	// aliases are the other names the module answers to (`alias=`), e.g. crc32c.
	aliases []string
}

// parseModinfo reads the .modinfo section of a module's ELF image.
func parseModinfo(image []byte) (modinfo, error) {
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return modinfo{}, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return modinfo{}, fmt.Errorf("no .modinfo section")
	}
	raw, err := sec.Data()
	if err != nil {
		return modinfo{}, fmt.Errorf(".modinfo: %w", err)
	}
	var mi modinfo
	for _, entry := range strings.Split(string(raw), "\x00") {
		key, value, ok := strings.Cut(entry, "=")
		if !ok {
			continue
		}
		switch key {
		case "depends":
			for _, d := range strings.Split(value, ",") {
				if d = strings.TrimSpace(d); d != "" {
					mi.depends = append(mi.depends, d)
				}
			}
		case "softdep":
			pre, post := parseSoftdep(value)
			mi.pre = append(mi.pre, pre...)
			mi.post = append(mi.post, post...)
		case "alias":
			mi.aliases = append(mi.aliases, value)
		}
	}
	return mi, nil
}

// parseSoftdep splits a softdep value ("pre: a b post: c") into its pre and post lists.
func parseSoftdep(value string) (pre, post []string) {
	var into *[]string
	for _, tok := range strings.Fields(value) {
		switch tok {
		case "pre:":
			into = &pre
		case "post:":
			into = &post
		default:
			if into != nil {
				*into = append(*into, tok)
			}
		}
	}
	return pre, post
}

// moduleSuffixes are the module file endings the builder reads, each with its decompressor.
// Debian's 6.1 kernels ship plain .ko; later ones and other distributions compress them.
// The image always gets plain .ko: decompressing in the guest cost seconds under TCG.
var moduleSuffixes = []struct {
	suffix     string
	decompress func([]byte) ([]byte, error)
}{
	{".ko", nil},
	{".ko.xz", func(b []byte) ([]byte, error) {
		r, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	}},
	{".ko.zst", func(b []byte) ([]byte, error) {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return d.DecodeAll(b, nil)
	}},
}

// splitModuleFile returns a module file's path without its compression suffix, and
// whether the file is a module at all.
func splitModuleFile(name string) (plain string, ok bool) {
	for _, s := range moduleSuffixes {
		if base, found := strings.CutSuffix(name, s.suffix); found {
			return base + ".ko", true
		}
	}
	return "", false
}

// readModule returns a module file's plain ELF image, decompressing it when needed.
func readModule(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for _, s := range moduleSuffixes {
		if !strings.HasSuffix(file, s.suffix) {
			continue
		}
		if s.decompress == nil {
			return raw, nil
		}
		plain, err := s.decompress(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return plain, nil
	}
	return nil, fmt.Errorf("%s: not a kernel module file", file)
}

// moduleName is the kernel's name for a module: dashes and underscores are the same to
// it, and /proc/modules and depends= entries use underscores.
func moduleName(s string) string {
	return strings.ReplaceAll(s, "-", "_")
}

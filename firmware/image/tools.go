package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tool is a program the builder runs and the Debian package that ships it.
type Tool struct {
	Command, Package string
}

// Tools are the programs Build and ESP run: the FAT file system of the EFI system
// partition is made and filled with dosfstools and mtools, without mounting anything, and
// the data partition with e2fsprogs.
var Tools = []Tool{
	{"mkfs.vfat", "dosfstools"},
	{"mcopy", "mtools"},
	{"mdir", "mtools"},
	{"mtype", "mtools"},
	{"mdel", "mtools"},
	{"mke2fs", "e2fsprogs"},
}

// ErrToolMissing is returned when a program the builder runs is not installed.
var ErrToolMissing = errors.New("tool missing")

// LookTool returns the path of a command, searching PATH and then /usr/sbin and /sbin,
// which a user's PATH often lacks (mkfs.vfat and mke2fs live there).
func LookTool(command string) (string, error) {
	if p, err := exec.LookPath(command); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, command)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	pkg := "its Debian package"
	for _, t := range Tools {
		if t.Command == command {
			pkg = "Debian's " + t.Package
		}
	}
	return "", fmt.Errorf("%s not found (install %s, make deps-image): %w", command, pkg, ErrToolMissing)
}

// run runs a tool and returns its stdout; the error has its stderr. mtools is told not to
// check the FAT geometry against a floppy's: an image file has none.
func run(ctx context.Context, command string, args ...string) ([]byte, error) {
	p, err := LookTool(command)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", command, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

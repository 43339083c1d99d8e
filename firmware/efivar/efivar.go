// Package efivar reads and writes the Boot Loader Interface's EFI variables (the ones
// systemd-boot reads and sets: LoaderEntryOneShot, LoaderEntrySelected, LoaderInfo) through
// efivarfs.
//
// An efivarfs file is 4 bytes of attributes, little endian, then the variable's data; the
// Boot Loader Interface's strings are UTF-16LE ending in a NUL. A write must hand the whole
// file to one write(2), and the kernel marks the files of variables it does not know
// immutable, so a change first clears that flag (as systemd's own tools do).
package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unicode/utf16"

	"golang.org/x/sys/unix"
)

const (
	// Dir is where efivarfs is mounted.
	Dir = "/sys/firmware/efi/efivars"
	// LoaderVendor is the vendor GUID of the Boot Loader Interface's variables.
	LoaderVendor = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
	// LoaderInfo names the boot loader and its version; systemd-boot sets it at every boot.
	LoaderInfo = "LoaderInfo"
	// LoaderEntrySelected is the id of the entry the boot loader booted.
	LoaderEntrySelected = "LoaderEntrySelected"
	// LoaderDevicePartUUID is the GPT unique GUID of the partition the boot loader was
	// loaded from: the disk the firmware booted from.
	LoaderDevicePartUUID = "LoaderDevicePartUUID"
	// LoaderEntryOneShot is an entry id, or a glob of ids, that systemd-boot boots at the
	// next boot only: it removes the variable before it boots the entry.
	LoaderEntryOneShot = "LoaderEntryOneShot"
)

// immutableFlag is FS_IMMUTABLE_FL of linux/fs.h, which x/sys/unix does not name.
const immutableFlag = 0x10

// attributes are non-volatile, boot service and runtime access: what systemd-boot expects
// of a variable the OS sets for it.
const attributes = 0x1 | 0x2 | 0x4

// Store is the Boot Loader Interface's variables in an efivarfs directory.
type Store struct {
	// Dir is the efivarfs mount point; "" means Dir.
	Dir string
}

func (s Store) path(name string) string {
	dir := s.Dir
	if dir == "" {
		dir = Dir
	}
	return filepath.Join(dir, name+"-"+LoaderVendor)
}

// Get returns a string variable; an error wrapping fs.ErrNotExist when it is not set.
func (s Store) Get(name string) (string, error) {
	raw, err := os.ReadFile(s.path(name))
	if err != nil {
		return "", fmt.Errorf("EFI variable %s: %w", name, err)
	}
	v, err := Decode(raw)
	if err != nil {
		return "", fmt.Errorf("EFI variable %s: %w", name, err)
	}
	return v, nil
}

// Set sets a string variable, non-volatile.
func (s Store) Set(name, value string) error {
	p := s.path(name)
	if err := mutable(p); err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	// One write(2): efivarfs takes the attributes and the data from one buffer.
	_, err = f.Write(Encode(value))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("EFI variable %s: writing: %w", name, err)
	}
	return nil
}

// Delete removes a variable; one that is not set is fine.
func (s Store) Delete(name string) error {
	p := s.path(name)
	if err := mutable(p); err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	return nil
}

// BootOnce makes the next boot, that one only, boot the entry pattern names
// (LoaderEntryOneShot).
func (s Store) BootOnce(pattern string) error { return s.Set(LoaderEntryOneShot, pattern) }

// OneShot is the LoaderEntryOneShot armed now, "" when none.
func (s Store) OneShot() (string, error) {
	v, err := s.Get(LoaderEntryOneShot)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return v, err
}

// Loader is the boot loader that booted, from LoaderInfo: "systemd-boot 252.39-1~deb12u2".
func (s Store) Loader() (string, error) { return s.Get(LoaderInfo) }

// mutable clears the immutable flag efivarfs gives the file of a variable it does not know;
// a file that does not exist is fine, and so is a directory that is no efivarfs (a test's).
func mutable(p string) error {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the file's flags: %w", err)
	}
	if flags&immutableFlag == 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^immutableFlag)); err != nil {
		return fmt.Errorf("clearing the immutable flag: %w", err)
	}
	return nil
}

// Encode is an efivarfs file holding the string value: the attributes, then UTF-16LE with a
// NUL.
func Encode(value string) []byte {
	units := append(utf16.Encode([]rune(value)), 0)
	out := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+2*len(units)), attributes)
	for _, u := range units {
		out = binary.LittleEndian.AppendUint16(out, u)
	}
	return out
}

// Decode reads a string variable's efivarfs file; the string ends at the first NUL.
func Decode(raw []byte) (string, error) {
	if len(raw) < 4 || (len(raw)-4)%2 != 0 {
		return "", fmt.Errorf("%d bytes, not attributes and UTF-16", len(raw))
	}
	units := make([]uint16, 0, (len(raw)-4)/2)
	for i := 4; i < len(raw); i += 2 {
		u := binary.LittleEndian.Uint16(raw[i:])
		if u == 0 {
			break
		}
		units = append(units, u)
	}
	return string(utf16.Decode(units)), nil
}

// Package layout is the contract between the disk image builder (firmware/image), the boot
// loader (systemd-boot) and the updater (daemon/update): where the two firmware slots live
// on the EFI system partition and how their Boot Loader Specification entries are named and
// written.
//
// The disk is a GPT with two partitions:
//
//	1  ESPPartName   EFI system partition, FAT32 with volume label ESPLabel:
//	                   EFI/BOOT/BOOTX64.EFI or BOOTAA64.EFI   systemd-boot
//	                   loader/loader.conf                     LoaderConf
//	                   loader/entries/edgegate-a.conf         slot A's entry (see Entry)
//	                   loader/entries/edgegate-b+0-0.conf     slot B's, on trial: booted once when armed
//	                   edgegate/a/vmlinuz, initramfs.cpio.gz, manifest.json, manifest.sig
//	                   edgegate/b/...
//	2  DataPartName  ext4 with the same label: the daemon's state, the gateway's own
//	                 configuration, the update state and history
//
// Which slot boots by default is decided by systemd-boot alone, from the entries: with no
// default in loader.conf it boots the first entry in its order, which puts entries without
// tries left (a "+0-DONE" boot counter) last, then orders by sort-key and by version, newest
// first. Every entry has the sort-key SortKey and the slot's generation as its version, so
// the committed slot written last boots by default.
//
// A new firmware is tried with the boot loader's one-shot choice, never by default: an
// update writes the inactive slot, gives its entry the next generation and the counter
// +0-0 (edgegate-b+0-0.conf: no tries left, so never picked by default however new), and
// sets systemd-boot's LoaderEntryOneShot EFI variable to the slot's OneShotPattern.
// systemd-boot removes the variable before it boots the entry it names, so that boot
// happens once: a firmware that panics, hangs or reboots unhealthy is followed by the
// committed slot, whose firmware arms the next try or records the rollback. The new firmware
// commits itself by renaming its entry to edgegate-b.conf; from then on it boots by default.
//
// Nothing here depends on a rename on FAT being atomic. systemd-boot renames the entry it
// boots to count the boot (edgegate-b+0-0.conf to edgegate-b+0-1.conf), and a power cut in
// that rename can leave both names; both are without tries left, so the default stays the
// committed slot. (Counted entries with tries left, systemd-boot's own fallback scheme, are
// not used: the same torn rename leaves an entry that keeps its tries forever, and a
// firmware that never reaches PID 1 is then booted again and again.) A torn commit rename
// leaves the committed name beside the trial one, and the committed one sorts first.
package layout

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Partition and file system names.
const (
	// ESPPartName is the EFI system partition's GPT partition name; PID 1 finds it by it.
	ESPPartName = "edgegate-esp"
	// ESPLabel is the FAT volume label of the EFI system partition.
	ESPLabel = "EDGEGATE"
	// DataPartName is the persistent data partition's GPT partition name and ext4 label.
	DataPartName = "edgegate-data"
)

// Paths on the EFI system partition, relative to its root, with forward slashes.
const (
	// LoaderConfPath is systemd-boot's configuration.
	LoaderConfPath = "loader/loader.conf"
	// EntriesDir holds the Boot Loader Specification entries, one per slot.
	EntriesDir = "loader/entries"
	// SlotsDir holds one directory per slot.
	SlotsDir = "edgegate"
	// KernelFile, InitramfsFile, ManifestFile and SignatureFile are a slot's files: the
	// bundle's kernel and initramfs, and its signed manifest, kept so that the slot can be
	// verified again (and its version read) without the bundle.
	KernelFile    = "vmlinuz"
	InitramfsFile = "initramfs.cpio.gz"
	ManifestFile  = "manifest.json"
	SignatureFile = "manifest.sig"
	// TrustPath is the gateway's trust record (security epoch floor, trusted key set),
	// beside the slots and in neither, so that whichever slot boots reads it; the updater
	// keeps a second copy on the data partition.
	TrustPath = SlotsDir + "/trust.json"
)

// KeysDir is where the firmware's initramfs holds the public keys it trusts for updates
// (one <key ID>.pub file each, firmware/bundle's format): baked in at build time. They are
// the starting set: once a committed firmware rotated the keys, the trust record's set
// replaces them.
const KeysDir = "/etc/edgegate/update-keys"

// SortKey is every slot entry's sort-key: it makes systemd-boot order the entries by
// version (the generation), newest first.
const SortKey = "edgegate"

// SlotParam is the kernel command line parameter naming the slot that booted
// (edgegate.slot=a): the running firmware learns its slot from it, with no EFI variable.
const SlotParam = "edgegate.slot"

// LoaderConf is loader/loader.conf. No default: the entries' order decides (see the
// package comment), and a default naming one slot would be booted even when it is bad.
// timeout 0 boots at once (a key held at power-on still shows the menu); editor no keeps
// the kernel command line from being edited at the console.
const LoaderConf = "timeout 0\neditor no\n"

// Slot is "a" or "b".
type Slot string

// The two slots.
const (
	SlotA Slot = "a"
	SlotB Slot = "b"
)

// Slots are both slots, in order.
var Slots = []Slot{SlotA, SlotB}

// ParseSlot accepts "a" or "b" (either case).
func ParseSlot(s string) (Slot, error) {
	switch strings.ToLower(s) {
	case "a":
		return SlotA, nil
	case "b":
		return SlotB, nil
	}
	return "", fmt.Errorf("slot %q: want a or b", s)
}

// Other returns the other slot.
func (s Slot) Other() Slot {
	if s == SlotA {
		return SlotB
	}
	return SlotA
}

// Dir is the slot's directory on the EFI system partition.
func (s Slot) Dir() string { return SlotsDir + "/" + string(s) }

// File is the path of one of the slot's files on the EFI system partition.
func (s Slot) File(name string) string { return s.Dir() + "/" + name }

// Tries is an entry's boot counter: tries left and tries done, systemd-boot's
// "+LEFT-DONE" file name suffix.
type Tries struct {
	Left, Done int
}

// Trial is the counter of a slot on trial: no tries left, so that systemd-boot boots it only
// when the one-shot variable names it (see the package comment).
var Trial = Tries{}

// Bad reports whether systemd-boot will no longer pick the entry on its own.
func (t Tries) Bad() bool { return t.Left == 0 }

// Entry is a slot's Boot Loader Specification entry.
type Entry struct {
	Slot Slot
	// Tries is the boot counter; nil for a committed entry (no counting), Trial's for a
	// slot on trial.
	Tries *Tries
	// Generation orders the slots: the higher boots first. It is the entry's version.
	Generation uint64
	// Firmware is the firmware version the slot holds, shown in the title.
	Firmware string
	// Options is the kernel command line. It must hold SlotParam=<Slot>.
	Options []string
}

// ErrNotEntry is returned by ParseFileName for a file that is no slot entry.
var ErrNotEntry = errors.New("not an edgegate slot entry")

var entryName = regexp.MustCompile(`^edgegate-([ab])(?:\+([0-9]{1,4})(?:-([0-9]{1,4}))?)?\.conf$`)

// FileName is the entry's file name in EntriesDir: edgegate-a.conf, edgegate-b+0-0.conf.
func (e Entry) FileName() string {
	return EntryFileName(e.Slot, e.Tries)
}

// EntryFileName is the file name of slot's entry with the boot counter t (nil: none).
func EntryFileName(slot Slot, t *Tries) string {
	if t == nil {
		return "edgegate-" + string(slot) + ".conf"
	}
	return fmt.Sprintf("edgegate-%s+%d-%d.conf", slot, t.Left, t.Done)
}

// ParseFileName reads the slot and boot counter from an entry's file name. systemd-boot
// writes "+LEFT-DONE" and also accepts "+LEFT" alone (done 0).
func ParseFileName(name string) (Slot, *Tries, error) {
	m := entryName.FindStringSubmatch(name)
	if m == nil {
		return "", nil, fmt.Errorf("%q: %w", name, ErrNotEntry)
	}
	slot := Slot(m[1])
	if m[2] == "" {
		return slot, nil, nil
	}
	t := &Tries{}
	t.Left, _ = strconv.Atoi(m[2]) // the pattern allows digits only
	if m[3] != "" {
		t.Done, _ = strconv.Atoi(m[3])
	}
	return slot, t, nil
}

// Render writes the entry's file content.
func (e Entry) Render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "title edgegate %s (slot %s)\n", e.Firmware, strings.ToUpper(string(e.Slot)))
	fmt.Fprintf(&b, "sort-key %s\n", SortKey)
	fmt.Fprintf(&b, "version %d\n", e.Generation)
	fmt.Fprintf(&b, "linux /%s\n", e.Slot.File(KernelFile))
	fmt.Fprintf(&b, "initrd /%s\n", e.Slot.File(InitramfsFile))
	fmt.Fprintf(&b, "options %s\n", strings.Join(e.Options, " "))
	return b.Bytes()
}

// ParseEntry reads an entry file written by Render (or edited by hand: unknown keys and
// comments are ignored). The file name gives the slot and counter; the content must
// agree with the slot (its linux and initrd paths and SlotParam).
func ParseEntry(name string, data []byte) (Entry, error) {
	slot, tries, err := ParseFileName(name)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Slot: slot, Tries: tries}
	var linux, initrd string
	haveVersion := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		value = strings.TrimSpace(value)
		switch key {
		case "title":
			// "edgegate <firmware> (slot X)"
			if f := strings.Fields(value); len(f) >= 2 && f[0] == "edgegate" {
				e.Firmware = f[1]
			}
		case "version":
			g, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return Entry{}, fmt.Errorf("%s line %d: version %q: want the slot's generation, a number", name, n, value)
			}
			e.Generation, haveVersion = g, true
		case "linux":
			linux = value
		case "initrd":
			initrd = value
		case "options":
			e.Options = append(e.Options, strings.Fields(value)...)
		}
	}
	if err := sc.Err(); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case !haveVersion:
		return Entry{}, fmt.Errorf("%s: no version (the slot's generation)", name)
	case linux != "/"+slot.File(KernelFile):
		return Entry{}, fmt.Errorf("%s: linux %q, want /%s", name, linux, slot.File(KernelFile))
	case initrd != "/"+slot.File(InitramfsFile):
		return Entry{}, fmt.Errorf("%s: initrd %q, want /%s", name, initrd, slot.File(InitramfsFile))
	}
	if got := OptionSlot(e.Options); got != slot {
		return Entry{}, fmt.Errorf("%s: options name slot %q (%s=), want %q", name, got, SlotParam, slot)
	}
	return e, nil
}

// OptionSlot returns the slot a kernel command line names with SlotParam, "" when none or
// not a slot.
func OptionSlot(options []string) Slot {
	for _, o := range options {
		if k, v, ok := strings.Cut(o, "="); ok && k == SlotParam {
			s, err := ParseSlot(v)
			if err != nil {
				return ""
			}
			return s
		}
	}
	return ""
}

// WithSlot returns options with SlotParam set to slot (replaced, or added at the end).
func WithSlot(options []string, slot Slot) []string {
	out := slices.DeleteFunc(slices.Clone(options), func(o string) bool {
		k, _, _ := strings.Cut(o, "=")
		return k == SlotParam
	})
	return append(out, SlotParam+"="+string(slot))
}

// Order returns the entries in the order systemd-boot boots them (see the package
// comment): entries without a counter or with tries left first, then by generation,
// highest first. The first is the one that boots by default, when no one-shot is armed.
func Order(entries []Entry) []Entry {
	out := slices.Clone(entries)
	slices.SortStableFunc(out, func(a, b Entry) int {
		aBad, bBad := a.Tries != nil && a.Tries.Bad(), b.Tries != nil && b.Tries.Bad()
		if aBad != bBad {
			if aBad {
				return 1
			}
			return -1
		}
		if a.Generation != b.Generation {
			if a.Generation > b.Generation {
				return -1
			}
			return 1
		}
		// systemd-boot then orders by the entry's id, descending.
		return -strings.Compare(string(a.Slot), string(b.Slot))
	})
	return out
}

// OneShotPattern is the value of systemd-boot's LoaderEntryOneShot EFI variable that boots
// slot's entry, whatever its boot counter: edgegate-b*.conf. systemd-boot boots the first
// entry whose id the glob matches, once, and removes the variable before it does; an id is
// the entry's file name in lower case (systemd-boot 252; later versions drop the boot
// counter from it, which the pattern matches too).
func OneShotPattern(slot Slot) string { return "edgegate-" + string(slot) + "*.conf" }

// OneShotMatches reports whether systemd-boot, given the one-shot pattern, boots the entry
// file name: the pattern is a glob over the lowercased name.
func OneShotMatches(pattern, fileName string) bool {
	ok, err := path.Match(pattern, strings.ToLower(fileName))
	return err == nil && ok
}

// EntryPath is an entry file's path on the EFI system partition.
func EntryPath(fileName string) string { return path.Join(EntriesDir, fileName) }

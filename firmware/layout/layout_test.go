package layout

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestFileNames(t *testing.T) {
	for _, c := range []struct {
		name  string
		slot  Slot
		tries *Tries
	}{
		{"edgegate-a.conf", SlotA, nil},
		{"edgegate-b+1-0.conf", SlotB, &Tries{1, 0}},
		{"edgegate-b+0-2.conf", SlotB, &Tries{0, 2}},
	} {
		slot, tries, err := ParseFileName(c.name)
		if err != nil || slot != c.slot || (tries == nil) != (c.tries == nil) || (tries != nil && *tries != *c.tries) {
			t.Errorf("ParseFileName(%q) = %q %v %v, want %q %v", c.name, slot, tries, err, c.slot, c.tries)
		}
		if got := EntryFileName(c.slot, c.tries); got != c.name {
			t.Errorf("EntryFileName(%q, %v) = %q, want %q", c.slot, c.tries, got, c.name)
		}
	}
	// systemd-boot accepts a counter without tries done.
	if _, tries, err := ParseFileName("edgegate-a+3.conf"); err != nil || *tries != (Tries{3, 0}) {
		t.Errorf("edgegate-a+3.conf: %v %v", tries, err)
	}
	for _, bad := range []string{"edgegate-c.conf", "edgegate-a.conf~", "debian.conf", "edgegate-a+x-1.conf", "edgegate-a+1-.conf"} {
		if _, _, err := ParseFileName(bad); !errors.Is(err, ErrNotEntry) {
			t.Errorf("ParseFileName(%q): %v, want ErrNotEntry", bad, err)
		}
	}
}

func TestEntryRoundTrip(t *testing.T) {
	e := Entry{Slot: SlotB, Tries: &Tries{2, 0}, Generation: 7, Firmware: "v1.2.3",
		Options: WithSlot([]string{"console=ttyS0", "panic=-1", "edgegate.slot=a"}, SlotB)}
	if got := strings.Join(e.Options, " "); got != "console=ttyS0 panic=-1 edgegate.slot=b" {
		t.Fatalf("WithSlot: %q", got)
	}
	text := string(e.Render())
	for _, want := range []string{"title edgegate v1.2.3 (slot B)\n", "sort-key edgegate\n", "version 7\n",
		"linux /edgegate/b/vmlinuz\n", "initrd /edgegate/b/initramfs.cpio.gz\n", "options console=ttyS0 panic=-1 edgegate.slot=b\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("entry lacks %q:\n%s", want, text)
		}
	}
	back, err := ParseEntry(e.FileName(), []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if back.Slot != e.Slot || *back.Tries != *e.Tries || back.Generation != 7 || back.Firmware != "v1.2.3" || !slices.Equal(back.Options, e.Options) {
		t.Errorf("round trip: %+v, want %+v", back, e)
	}
	// An entry whose content points at the other slot is refused, by file and field.
	swapped := strings.ReplaceAll(text, "/edgegate/b/", "/edgegate/a/")
	if _, err := ParseEntry("edgegate-b.conf", []byte(swapped)); err == nil || !strings.Contains(err.Error(), "linux") {
		t.Errorf("entry for the wrong slot's kernel: %v", err)
	}
	if _, err := ParseEntry("edgegate-a.conf", []byte(text)); err == nil {
		t.Error("slot b's content under slot a's name was accepted")
	}
	if _, err := ParseEntry("edgegate-b.conf", []byte(strings.ReplaceAll(text, "version 7", "version seven"))); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("bad version: %v", err)
	}
}

func TestOrder(t *testing.T) {
	a := Entry{Slot: SlotA, Generation: 1}
	trial := Entry{Slot: SlotB, Generation: 2, Tries: &Trial}
	tried := Entry{Slot: SlotB, Generation: 2, Tries: &Tries{0, 1}}
	counted := Entry{Slot: SlotB, Generation: 2, Tries: &Tries{1, 0}}
	committed := Entry{Slot: SlotB, Generation: 2}
	for _, c := range []struct {
		entries []Entry
		first   Slot
	}{
		{[]Entry{a, trial}, SlotA},        // a trial boots only when the one-shot names it
		{[]Entry{a, tried}, SlotA},        // also after its boot was counted
		{[]Entry{trial, tried, a}, SlotA}, // a torn counter rename: both names
		{[]Entry{a, counted}, SlotB},      // systemd-boot's own counting, which the updater does not use
		{[]Entry{committed, a}, SlotB},    // committed stays
		{[]Entry{tried, committed, a}, SlotB},
		{[]Entry{a}, SlotA},
	} {
		if got := Order(c.entries)[0].Slot; got != c.first {
			t.Errorf("Order(%v) boots %q, want %q", c.entries, got, c.first)
		}
	}
}

func TestOneShot(t *testing.T) {
	if p := OneShotPattern(SlotB); p != "edgegate-b*.conf" {
		t.Errorf("OneShotPattern(b) = %q", p)
	}
	for _, c := range []struct {
		name string
		want bool
	}{
		{"edgegate-b+0-0.conf", true},
		{"edgegate-b+0-1.conf", true},
		{"edgegate-b.conf", true}, // a newer systemd-boot's id drops the counter
		{"EDGEGATE-B+0-0.CONF", true},
		{"edgegate-a+0-0.conf", false},
		{"edgegate-a.conf", false},
	} {
		if got := OneShotMatches(OneShotPattern(SlotB), c.name); got != c.want {
			t.Errorf("OneShotMatches(b, %q) = %v, want %v", c.name, got, c.want)
		}
	}
	if EntryFileName(SlotB, &Trial) != "edgegate-b+0-0.conf" {
		t.Errorf("a trial entry is named %q", EntryFileName(SlotB, &Trial))
	}
}

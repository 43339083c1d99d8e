package pid1

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestConsoleLog(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var kmsg bytes.Buffer
	c := newConsole(out)
	var level slog.LevelVar
	log := slog.New(c.handler(&level))

	c.marker("EDGEGATE-BOOT-START") // before the kernel log is there
	c.attachKmsg(&kmsg, 0)          // a console log level that echoes nothing: priorities unchanged
	log.Debug("not shown at info")
	log.With("component", "proxy").Error("sync failed", "err", "EBUSY")
	level.Set(slog.LevelDebug)
	log.WithGroup("dhcp").Debug("lease", "dev", "eth0")
	c.hold()
	log.Warn("while a test owns the console")
	c.marker("EDGEGATE-TEST-EXIT %d", 0)
	c.release()
	log.Info("after")

	stamp := regexp.MustCompile(`time=\d\d:\d\d:\d\d\.\d{3} `)
	got, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	wantConsole := `EDGEGATE-BOOT-START
time=T level=ERROR msg="sync failed" component=proxy err=EBUSY
time=T level=DEBUG msg=lease dhcp.dev=eth0
EDGEGATE-TEST-EXIT 0
time=T level=WARN msg="while a test owns the console"
time=T level=INFO msg=after
`
	if diff := cmp.Diff(wantConsole, stamp.ReplaceAllString(string(got), "time=T ")); diff != "" {
		t.Errorf("console (-want +got):\n%s", diff)
	}
	wantKmsg := `<3>edgegate: time=T level=ERROR msg="sync failed" component=proxy err=EBUSY
<7>edgegate: time=T level=DEBUG msg=lease dhcp.dev=eth0
<4>edgegate: time=T level=WARN msg="while a test owns the console"
<6>edgegate: EDGEGATE-TEST-EXIT 0
<6>edgegate: time=T level=INFO msg=after
`
	if diff := cmp.Diff(wantKmsg, stamp.ReplaceAllString(kmsg.String(), "time=T ")); diff != "" {
		t.Errorf("kernel log (-want +got):\n%s", diff)
	}
}

func TestConsoleHoldIsBounded(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c := newConsole(out)
	log := slog.New(c.handler(slog.LevelInfo))
	c.hold()
	for range maxHeldLines + 5 {
		log.Info("x")
	}
	c.release()
	got, _ := os.ReadFile(out.Name())
	if n := bytes.Count(got, []byte("msg=x")); n != maxHeldLines {
		t.Errorf("%d held lines printed, want %d", n, maxHeldLines)
	}
	if !bytes.Contains(got, []byte("edgegate: 5 more log lines went to the kernel log only (dmesg)\n")) {
		t.Errorf("no note of the dropped lines:\n%s", got[len(got)-200:])
	}
}

// TestKmsgRecords: no record is echoed back to the console by the kernel (priorities stay
// at or above the console log level), and a line too long for one record is cut into
// several instead of being refused.
func TestKmsgRecords(t *testing.T) {
	var kmsg bytes.Buffer
	c := &console{kmsg: &kmsg}
	c.attachKmsg(&kmsg, 4) // "quiet"
	c.writeLog(slog.LevelError, []byte("short\n"))
	c.writeLog(slog.LevelDebug, []byte("debug\n"))
	long := strings.Repeat("é", 1000) + "end\n" // two-byte runes: a cut must not split one
	c.writeLog(slog.LevelInfo, []byte(long))
	records := strings.SplitAfter(kmsg.String(), "\n")
	records = records[:len(records)-1]
	if records[0] != "<4>edgegate: short\n" || records[1] != "<7>edgegate: debug\n" {
		t.Errorf("records = %q, want an error lifted to the console level, debug kept", records[:2])
	}
	var joined strings.Builder
	for i, r := range records[2:] {
		if len(r) > kmsgRecordMax {
			t.Errorf("record %d is %d bytes, over %d", i, len(r), kmsgRecordMax)
		}
		if !utf8.ValidString(r) {
			t.Errorf("record %d cuts a character: %q", i, r[len(r)-5:])
		}
		prefix := "<6>edgegate: "
		if i > 0 {
			prefix = "<6>edgegate: … "
		}
		rest, ok := strings.CutPrefix(r, prefix)
		if !ok {
			t.Fatalf("record %d = %.40q…, want prefix %q", i, r, prefix)
		}
		joined.WriteString(strings.TrimSuffix(rest, "\n"))
	}
	if len(records) != 5 || joined.String()+"\n" != long {
		t.Errorf("%d records that join to %d bytes; want 3 for the long line, joining to the line", len(records), joined.Len())
	}
}

package kerneltest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// FullSyncBenchmarks runs body as the sub-benchmarks NxM/first (a full sync into an empty
// namespace: body resets it before each) and NxM/again (a full sync over the same rules:
// the periodic one), for each size of N Services x M endpoints (modeltest.BenchObjects).
func FullSyncBenchmarks(b *testing.B, sizes [][2]int, body func(b *testing.B, snap *model.Snapshot, again bool)) {
	for _, size := range sizes {
		snap := mt.Snapshot(mt.BenchObjects(size[0], size[1])...)
		for _, again := range []bool{false, true} {
			name := fmt.Sprintf("%dx%d/first", size[0], size[1])
			if again {
				name = fmt.Sprintf("%dx%d/again", size[0], size[1])
			}
			b.Run(name, func(b *testing.B) { body(b, snap, again) })
		}
	}
}

// LibraryMessages returns a google/nftables connection that records what each Flush
// would send, and a function that flushes it and checks that got is the message it
// recorded last, byte for byte: for tests comparing an encoder of their own with the
// library. Flags may differ only in the acknowledgement and echo the library asks for,
// which nlbatch clears anyway.
func LibraryMessages(tb testing.TB) (*nftables.Conn, func(where string, got netlink.Message)) {
	tb.Helper()
	var sent []netlink.Message
	lib, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			sent = append(sent, req[1:len(req)-1]...) // without the batch's begin and end
		}
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 20)}}, nil
	}))
	if err != nil {
		tb.Fatal(err)
	}
	return lib, func(where string, got netlink.Message) {
		tb.Helper()
		if err := lib.Flush(); err != nil {
			tb.Fatalf("%s: %v", where, err)
		}
		if len(sent) == 0 {
			tb.Fatalf("%s: the library recorded no message", where)
		}
		want := sent[len(sent)-1]
		if got.Header.Type != want.Header.Type || got.Header.Flags != want.Header.Flags&^(netlink.Acknowledge|netlink.Echo) {
			tb.Errorf("%s: header %+v, the library's %+v", where, got.Header, want.Header)
		}
		if !bytes.Equal(got.Data, want.Data) {
			tb.Fatalf("%s: message differs from the library's\ngot:  %x\nwant: %x", where, got.Data, want.Data)
		}
	}
}

// OneChangeBenchmarks runs, for each size of N Services x M endpoints, the sync after one
// endpoint of one Service changed over rules holding the rest, as the daemon runs it: the
// tracker's snapshot, then sync (the backend's planner and partial apply; full for the
// first, outside the timer). newSync is called inside the namespace the benchmark runs in
// (enter, a kerneltest.InNetns wrapper). It reports the CPU per sync (cpu-ms/op).
func OneChangeBenchmarks(b *testing.B, sizes [][2]int, enter func(testing.TB, func(string)), newSync func() func(snap *model.Snapshot, full bool) error) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(b *testing.B) {
			tr := model.NewTracker()
			for _, o := range mt.BenchObjects(size[0], size[1]) {
				mt.Upsert(tr, o)
			}
			enter(b, func(string) {
				sync := newSync()
				snap, _ := tr.Snapshot()
				if err := sync(snap, true); err != nil {
					b.Fatal(err)
				}
				i := 0
				cpu := CPUTime(b)
				for b.Loop() {
					i++
					tr.UpsertSlice(mt.BenchSlice(size[0]-1, size[1], i%2))
					snap, _ := tr.Snapshot()
					if err := sync(snap, false); err != nil {
						b.Fatal(err)
					}
				}
				if i > 0 {
					b.ReportMetric(float64(CPUTime(b)-cpu)/float64(i)/1e6, "cpu-ms/op")
				}
			})
		})
	}
}

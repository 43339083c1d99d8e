// Command boot runs the boot benchmark alone (package boot) and prints its table: for each
// board, the time from QEMU's start to each point of the boot, the last being the
// rules programmed. Root only when QEMU must be installed.
//
//	cd bench && go run ./cmd/boot [-boards generic-arm64,pc-x86_64,qemu-arm64,qemu-x86_64] [-services 1000] [-runs 1]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgegate/edgegate/bench/boot"
	"github.com/edgegate/edgegate/board"
)

func main() {
	boards := flag.String("boards", strings.Join(board.Names(), ","), "boards, comma-separated")
	services := flag.Int("services", 1000, "Services baked into the firmware")
	mode := flag.String("mode", "nftables", "the daemon's proxy mode")
	runs := flag.Int("runs", 1, "boots per board")
	dir := flag.String("dir", "", "scratch directory, kept (default a temporary one, removed)")
	quiet := flag.Bool("q", false, "no progress lines and consoles on stderr")
	flag.Parse()
	o := boot.Options{Boards: strings.Split(*boards, ","), Services: *services, Mode: *mode, Runs: *runs, Dir: *dir, Log: os.Stderr}
	if *quiet {
		o.Log = io.Discard
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	t0 := time.Now()
	results, err := boot.Run(ctx, o)
	Table(os.Stdout, results)
	fmt.Printf("took %v\n", time.Since(t0).Round(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "boot:", err)
		os.Exit(1)
	}
}

// Table prints one row per boot: QEMU start to each phase, in seconds.
func Table(w io.Writer, results []boot.Result) {
	cols := boot.Columns
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "board\trun\tservices\t%s\tfirst sync\temulation\t\n", strings.Join(cols, "\t"))
	for _, r := range results {
		var cells []string
		for _, c := range cols {
			if d, ok := r.At(c); ok {
				cells = append(cells, fmt.Sprintf("%.2fs", d.Seconds()))
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.2fs\t%s\t\n", r.Board, r.Run, r.Services, strings.Join(cells, "\t"), r.Sync.Seconds(), r.Emulation)
	}
	tw.Flush()
}

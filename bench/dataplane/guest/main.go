// Command guest is the data-plane benchmark's program inside the QEMU guest: the firmware
// runs it as its test binary (/edgegate-test) once PID 1's daemon is ready. It measures
// the given modes and sizes in namespaces of its own with /init (edgegate) as a plain
// daemon, like the host part does, and prints one line per result for the host to read
// off the console (dataplane.ResultMarker, then JSON). Progress goes to the console too.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/bench/dataplane"
)

func main() {
	edgegate := flag.String("edgegate", "/init", "the edgegate binary")
	modes := flag.String("modes", "ipvs,nftables", "proxy modes, comma-separated; each size is measured in every mode in this order")
	sizes := flag.String("sizes", "1000,10000,30000", "Service counts, comma-separated")
	conns := flag.Int("conns", 1000, "connections per series")
	dir := flag.String("dir", "/tmp/egbench", "scratch directory")
	load := flag.Bool("load", false, "add the load runs")
	var lo dataplane.LoadOptions
	flag.IntVar(&lo.Streams, "load-streams", 0, "load: parallel TCP streams")
	flag.DurationVar(&lo.Duration, "load-duration", 0, "load: length of each run")
	flag.IntVar(&lo.Workers, "load-workers", 0, "load: parallel connecting threads")
	flag.IntVar(&lo.Rounds, "load-rounds", 0, "load: runs of each series, interleaved")
	flag.Parse()
	var loadOpts *dataplane.LoadOptions
	if *load {
		loadOpts = &lo
	}

	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			fail(fmt.Errorf("-sizes: %w", err))
		}
		ns = append(ns, n)
	}
	t0 := time.Now()
	_, err := dataplane.MeasureHere(context.Background(), dataplane.LocalOptions{
		Where: "qemu-x86_64 guest", EdgegateBin: *edgegate, Modes: strings.Split(*modes, ","), Sizes: ns,
		Conns: *conns, Dir: *dir, Log: os.Stdout,
		// Under TCG a full sync of 30k virtual servers takes minutes, not seconds.
		ProgramTimeout: 8 * time.Minute,
		Load:           loadOpts,
		Result: func(r dataplane.Result) {
			js, err := json.Marshal(r)
			if err != nil {
				fail(err)
			}
			fmt.Printf("%s%s\n", dataplane.ResultMarker, js)
		},
	})
	if err != nil {
		fail(err)
	}
	fmt.Printf("guest: done in %v\n", time.Since(t0).Round(time.Millisecond))
}

func fail(err error) {
	fmt.Printf("%s%v\n", dataplane.ErrorMarker, err)
	os.Exit(1)
}

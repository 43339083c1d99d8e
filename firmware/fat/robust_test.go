package fat_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/edgegate/edgegate/firmware/fat"
)

// damageRuns is how many seeded damages TestRepairSurvivesGarbage repairs.
const damageRuns = 240

// TestRepairSurvivesGarbage overwrites random sectors of the FATs and directories, with
// random bytes or with older versions of themselves as lost writes leave them, and
// checks that Repair never panics or hangs and either refuses, writing nothing, or
// leaves a volume a second Repair finds clean. It then replays a power cut at a random
// point of each repair (writes after the last completed Sync lost, kept or reordered) and
// checks that the next Repair still gets the volume clean: the phases' order holds.
func TestRepairSurvivesGarbage(t *testing.T) {
	fx := smallESP(t)
	targets := damageTargets(fx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := uint64(w); seed < damageRuns; seed += 2 {
				if err := survive(fx, targets, seed); err != nil {
					var r refusal
					if errors.As(err, &r) {
						mu.Lock()
						refused[r.reason]++
						mu.Unlock()
						continue
					}
					t.Errorf("seed %d: %v", seed, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d damaged volumes, refused: %v", damageRuns, refused)
	n := 0
	for _, c := range refused {
		n += c
	}
	if n > damageRuns/4 {
		t.Errorf("Repair refused %d of %d damaged volumes: too careful to be useful", n, damageRuns)
	}
}

// refusal is a damaged volume Repair refused to touch, correctly.
type refusal struct{ reason string }

func (r refusal) Error() string { return "refused: " + r.reason }

// damageTargets are the sectors worth damaging: FAT and directory sectors that hold
// something or held something while the image was built.
func damageTargets(fx *fixture) []int64 {
	var s []int64
	zero := make([]byte, sector)
	for _, m := range fx.meta {
		if len(fx.history[m]) > 0 || !bytes.Equal(fx.image[m*sector:(m+1)*sector], zero) {
			s = append(s, m)
		}
	}
	return s
}

// survive damages the fixture as the seed says and checks what Repair makes of it.
func survive(fx *fixture, targets []int64, seed uint64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 0xfa7))
	dev := newMemDevice(fx.image)
	var what []string
	for range 1 + rng.IntN(4) {
		what = append(what, damage(rng, fx, targets, dev))
	}
	desc := strings.Join(what, "; ")
	damaged := dev.clone()
	size := dev.size()

	rep, err := fat.Repair(dev, size, fat.Options{})
	if err != nil {
		if len(dev.log) != 0 {
			return fmt.Errorf("%s: Repair refused (%v) after writing %d sectors", desc, err, len(dev.log))
		}
		if !errors.Is(err, fat.ErrUnsupported) && !errors.Is(err, fat.ErrLimit) {
			return fmt.Errorf("%s: Repair: %v", desc, err)
		}
		return refusal{strings.TrimPrefix(err.Error(), "fat: ")}
	}
	if err := clean(dev, size, "after the repair"); err != nil {
		return fmt.Errorf("%s: %v (first repair: %v)", desc, err, rep.Findings)
	}

	cut := dev.cut(damaged, rng)
	if _, err := fat.Repair(cut, size, fat.Options{}); err != nil {
		return fmt.Errorf("%s: Repair after a power cut during the repair: %v", desc, err)
	}
	if err := clean(cut, size, "after a power cut during the repair and another repair"); err != nil {
		return fmt.Errorf("%s: %v", desc, err)
	}
	return nil
}

// clean checks that Repair finds nothing on a copy of dev and writes nothing.
func clean(dev *memDevice, size int64, when string) error {
	again := dev.clone()
	rep, err := fat.Repair(again, size, fat.Options{})
	if err != nil {
		return fmt.Errorf("Repair %s: %v", when, err)
	}
	if !rep.Clean() || len(again.log) != 0 || again.syncs != 0 {
		return fmt.Errorf("Repair %s found %v and wrote %d sectors", when, rep.Findings, len(again.log))
	}
	return nil
}

// damage overwrites one sector the way the seed says and describes it.
func damage(rng *rand.Rand, fx *fixture, targets []int64, dev *memDevice) string {
	s := targets[rng.IntN(len(targets))]
	if rng.IntN(8) == 0 {
		s = fx.meta[rng.IntN(len(fx.meta))]
	}
	b := bytesOf(dev.sector(s))
	switch k := rng.IntN(10); {
	case k < 4 && len(fx.history[s]) > 0:
		v := rng.IntN(len(fx.history[s]))
		copy(b, fx.history[s][v])
		dev.over[s] = b
		return fmt.Sprintf("sector %d: version %d of %d", s, v, len(fx.history[s]))
	case k < 6:
		fill(rng, b)
		dev.over[s] = b
		return fmt.Sprintf("sector %d: random", s)
	case k < 8:
		slot := rng.IntN(sector / 32)
		n := 1 + rng.IntN(3)
		fill(rng, b[slot*32:min(sector, (slot+n)*32)])
		dev.over[s] = b
		return fmt.Sprintf("sector %d: random slots %d+%d", s, slot, n)
	case k < 9:
		for range 1 + rng.IntN(4) {
			b[rng.IntN(sector)] ^= 1 << rng.IntN(8)
		}
		dev.over[s] = b
		return fmt.Sprintf("sector %d: bit flips", s)
	default:
		clear(b)
		dev.over[s] = b
		return fmt.Sprintf("sector %d: zeros", s)
	}
}

func bytesOf(b []byte) []byte { return append([]byte(nil), b...) }

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// cut is what the device holds after power fails during the writes logged since start:
// a disk whose volatile cache keeps everything written before the last completed Sync
// and loses, keeps or tears any of the 512-byte writes after it, in any order.
func (d *memDevice) cut(start *memDevice, rng *rand.Rand) *memDevice {
	c := start.clone()
	if len(d.log) == 0 {
		return c
	}
	last := rng.IntN(d.syncs + 1) // the Syncs that completed
	for _, w := range d.log {
		switch {
		case w.epoch < last:
			c.over[w.sector] = w.data
		case w.epoch == last && rng.IntN(2) == 0:
			c.over[w.sector] = w.data
		}
	}
	return c
}

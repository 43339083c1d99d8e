package rollout_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/update/rollout"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/layout"
)

// TestBelowFloorHalts runs the controller against the real updater of a gateway whose
// trust record says security epoch 2: a forced rollout of an epoch 1 bundle is refused
// before anything is written, and the gateway's entry and the halted rollout say why.
func TestBelowFloorHalts(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	esp := t.TempDir()
	entry := layout.Entry{Slot: layout.SlotA, Generation: 1, Firmware: v1_1, Options: []string{"edgegate.slot=a"}}
	for path, data := range map[string][]byte{
		layout.EntryPath(entry.FileName()): entry.Render(),
		layout.TrustPath:                   []byte(`{"format": 1, "securityEpochFloor": 2}`),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(esp, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(esp, path), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pub, key, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	vars := efivar.Store{Dir: t.TempDir()} // what systemd-boot leaves: its name
	if err := vars.Set(efivar.LoaderInfo, "systemd-boot 252"); err != nil {
		t.Fatal(err)
	}
	upd := update.New(update.Options{ESP: update.DirESP(esp), Loader: vars, StateDir: t.TempDir(), Slot: layout.SlotA,
		Board: board, Version: v1_1, Keys: []bundle.PublicKey{pub}, Log: testLogger(t)})
	if st := upd.Status(); !st.Available || st.Trust.SecurityEpochFloor != 2 {
		t.Fatalf("updater: %+v", st)
	}
	var b bytes.Buffer
	if _, err := bundle.Create(&b, bundle.Release{Board: board, Version: v1_0, BuildTime: time.Now(), SecurityEpoch: 1},
		bytes.NewReader([]byte("kernel")), bytes.NewReader([]byte("initramfs")), key); err != nil {
		t.Fatal(err)
	}
	url, sum := e.srv.add("/old.bundle", b.Bytes())
	e.create("old", map[string]any{"version": v1_0, "bundleURL": url, "sha256": sum, "force": true}, nil)

	c := e.controller("gw1", nil)
	c.Updater = upd
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	got := e.waitPhase("old", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "security epoch 1, below this gateway's floor 2") || !strings.Contains(got.Message, "force does not override it") {
		t.Errorf("entry %+v", got)
	}
	waitFor(t, "rollout Halted", within, func() bool { return e.get("old").Status.Phase == rollout.PhaseHalted })
	st := upd.Status()
	if len(st.History) != 1 || st.History[0].Phase != update.PhaseRefused || st.Pending != nil {
		t.Errorf("updater history %+v pending %+v", st.History, st.Pending)
	}
	if _, err := os.Stat(filepath.Join(esp, layout.SlotB.Dir())); !os.IsNotExist(err) {
		t.Errorf("slot b was written: %v", err)
	}
}

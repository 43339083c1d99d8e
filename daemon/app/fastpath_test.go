package app

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
)

type fakeFastPath struct {
	links   []fastpath.Link
	applied [][]string
	fail    error
}

func (f *fakeFastPath) Links() ([]fastpath.Link, error) { return f.links, nil }
func (f *fakeFastPath) Apply(d []string) error {
	if f.fail != nil {
		return f.fail
	}
	f.applied = append(f.applied, d)
	return nil
}
func (f *fakeFastPath) Cleanup() error { return nil }

// The fast path follows the interfaces: written at the first look, again only when they
// change; a kernel without flowtables is said once and not asked again.
func TestFastPathFollowsInterfaces(t *testing.T) {
	var buf bytes.Buffer
	k := &fakeFastPath{links: []fastpath.Link{{Name: "eth0", Type: "device", Up: true}, {Name: "lo", Type: "device", Up: true, Loopback: true}}}
	f := &fastPath{k: k, log: slog.New(slog.NewTextHandler(&buf, nil))}
	f.step()
	f.step()
	k.links = append(k.links, fastpath.Link{Name: "eth1", Type: "device", Up: true})
	f.step()
	if got := fmt.Sprint(k.applied); got != "[[eth0] [eth0 eth1]]" {
		t.Errorf("applied %s, want [[eth0] [eth0 eth1]]", got)
	}

	buf.Reset()
	k = &fakeFastPath{links: k.links, fail: fmt.Errorf("%w: ENOENT", fastpath.ErrUnsupported)}
	f = &fastPath{k: k, log: slog.New(slog.NewTextHandler(&buf, nil))}
	f.step()
	k.fail = errors.New("must not be asked again")
	f.step()
	if n := strings.Count(buf.String(), "fast path unavailable"); n != 1 || strings.Contains(buf.String(), "asked again") {
		t.Errorf("log:\n%s", buf.String())
	}
}

package prereq

import (
	"errors"
	"runtime"
	"testing"
)

// recorder is a testing.TB that records how a helper ended the test; like the real one,
// Skip and Fatalf end the goroutine that calls them.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, args[0].(string)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, args[0].(string)
	runtime.Goexit()
}

// call runs fn with r on its own goroutine, as the testing package runs a test.
func (r *recorder) call(fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
}

func TestMissingSkipsOrFailsUnderCI(t *testing.T) {
	for _, ci := range []string{"", "true", "false"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			r := &recorder{TB: t}
			r.call(func(tb testing.TB) { Missing(tb, "no %s here", "mkfs.vfat") })
			if r.msg != "no mkfs.vfat here" {
				t.Errorf("reason = %q", r.msg)
			}
			if want := ci == "true"; r.failed != want || r.skipped == want {
				t.Errorf("failed=%v skipped=%v, want failed=%v", r.failed, r.skipped, want)
			}
		})
	}
}

func TestNoErrPassesNil(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	r.call(func(tb testing.TB) { NoErr(tb, nil) })
	if r.failed || r.skipped {
		t.Fatal("a nil error ended the test")
	}
	r.call(func(tb testing.TB) { NoErr(tb, errors.New("qemu-io not found")) })
	if !r.failed || r.msg != "qemu-io not found" {
		t.Fatalf("failed=%v msg=%q", r.failed, r.msg)
	}
}

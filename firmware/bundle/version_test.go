package bundle

import (
	"cmp"
	"errors"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
	}{
		{"v0.4.0", Version{Minor: 4}},
		{"v1.2.3", Version{Major: 1, Minor: 2, Patch: 3}},
		{"v0.4.0-12-gabc1234", Version{Minor: 4, Commits: 12, Hash: "abc1234"}},
		{"v0.4.0-12-gabc1234-dirty", Version{Minor: 4, Commits: 12, Hash: "abc1234", Dirty: true}},
		{"v0.4.0-dirty", Version{Minor: 4, Dirty: true}},
		{"v0.5.0-rc.1", Version{Minor: 5, Pre: []string{"rc", "1"}}},
		{"v0.5.0-rc.1-3-g0123abcd", Version{Minor: 5, Pre: []string{"rc", "1"}, Commits: 3, Hash: "0123abcd"}},
		{"v0.5.0-alpha-beta", Version{Minor: 5, Pre: []string{"alpha-beta"}}},
		{"v18446744073709551615.0.0", Version{Major: 1<<64 - 1}},
	} {
		got, err := ParseVersion(tc.in)
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.in || got.Compare(tc.want) != 0 || got.Hash != tc.want.Hash || got.Dirty != tc.want.Dirty {
			t.Errorf("ParseVersion(%q) = %+v (%s), want %+v", tc.in, got, got, tc.want)
		}
	}
}

func TestParseVersionRefuses(t *testing.T) {
	for _, in := range []string{
		"", "dev", "6dfca84-dirty", "0.4.0", "v0.4", "v0.4.0.1", "v01.4.0", "v0.04.0", "v-1.0.0",
		"v0.4.0+build.5", "v0.4.0-", "v0.4.0-rc..1", "v0.4.0-rc.01", "v0.4.0-rc_1", "v 0.4.0",
		"v18446744073709551616.0.0", "v0.4.0-12-g" + string(make([]byte, 130)),
	} {
		_, err := ParseVersion(in)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseVersion(%q) = %v, want ErrMalformed", in, err)
		}
	}
}

func TestVersionCompare(t *testing.T) {
	// Each row is older than the next; rows with the same rank compare equal.
	order := []struct {
		rank int
		v    string
	}{
		{0, "v0.3.9"},
		{1, "v0.4.0-alpha"},
		{2, "v0.4.0-alpha.1"},
		{3, "v0.4.0-alpha.beta"},
		{4, "v0.4.0-beta.2"},
		{5, "v0.4.0-beta.11"},
		{6, "v0.4.0-rc.1"},
		{7, "v0.4.0-rc.1-2-gaaaa"},
		{8, "v0.4.0"},
		{8, "v0.4.0-dirty"},
		{9, "v0.4.0-1-gbbbb"},
		{10, "v0.4.0-12-gabc1234"},
		{10, "v0.4.0-12-gdef5678"},
		{10, "v0.4.0-12-gabc1234-dirty"},
		{11, "v0.4.1"},
		{12, "v0.10.0"},
		{13, "v1.0.0"},
	}
	for _, a := range order {
		for _, b := range order {
			va, _ := ParseVersion(a.v)
			vb, _ := ParseVersion(b.v)
			want := cmp.Compare(a.rank, b.rank)
			if got := va.Compare(vb); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", a.v, b.v, got, want)
			}
		}
	}
}

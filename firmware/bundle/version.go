package bundle

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version is a firmware version as the build stamps it: a v-prefixed semantic version
// (vMAJOR.MINOR.PATCH with an optional pre-release such as -rc.1), optionally followed by git
// describe's "-N-gHASH" (N commits after that tag) and "-dirty". Build metadata ("+...") is
// not accepted: the build never writes it and it would not take part in the ordering anyway.
type Version struct {
	Major, Minor, Patch uint64
	// Pre holds the dot-separated pre-release identifiers ("rc", "1"); empty for a release.
	Pre []string
	// Commits is git describe's count of commits after the tag; Hash its abbreviated commit.
	Commits uint64
	Hash    string
	Dirty   bool
}

// maxVersionLen bounds what ParseVersion looks at; real versions are a few dozen bytes.
const maxVersionLen = 128

var (
	describeSuffix = regexp.MustCompile(`-([0-9]+)-g([0-9a-f]{4,40})$`)
	preIdent       = regexp.MustCompile(`^[0-9A-Za-z-]+$`)
)

// ParseVersion parses s; an unparseable version is ErrMalformed.
func ParseVersion(s string) (Version, error) {
	v, err := parseVersion(s)
	if err != nil {
		return Version{}, fmt.Errorf("version %q: %s: %w", s, err, ErrMalformed)
	}
	return v, nil
}

func parseVersion(s string) (Version, error) {
	var v Version
	if len(s) > maxVersionLen {
		return v, fmt.Errorf("longer than %d bytes", maxVersionLen)
	}
	rest, ok := strings.CutPrefix(s, "v")
	if !ok {
		return v, fmt.Errorf("does not start with v")
	}
	rest, v.Dirty = strings.CutSuffix(rest, "-dirty")
	if m := describeSuffix.FindStringSubmatch(rest); m != nil {
		n, err := parseNumber(m[1])
		if err != nil {
			return v, fmt.Errorf("commit count: %s", err)
		}
		v.Commits, v.Hash = n, m[2]
		rest = rest[:len(rest)-len(m[0])]
	}
	if strings.Contains(rest, "+") {
		return v, fmt.Errorf("build metadata (+...) is not accepted")
	}
	core, pre, hasPre := strings.Cut(rest, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("want MAJOR.MINOR.PATCH, got %q", core)
	}
	for i, dst := range []*uint64{&v.Major, &v.Minor, &v.Patch} {
		n, err := parseNumber(parts[i])
		if err != nil {
			return v, fmt.Errorf("%s: %s", [3]string{"major", "minor", "patch"}[i], err)
		}
		*dst = n
	}
	if hasPre {
		v.Pre = strings.Split(pre, ".")
		for _, id := range v.Pre {
			if !preIdent.MatchString(id) {
				return v, fmt.Errorf("pre-release identifier %q: want [0-9A-Za-z-]+", id)
			}
			if isNumeric(id) {
				if _, err := parseNumber(id); err != nil {
					return v, fmt.Errorf("pre-release identifier %q: %s", id, err)
				}
			}
		}
	}
	return v, nil
}

// parseNumber accepts the decimal numbers semver allows: no sign, no leading zeros.
func parseNumber(s string) (uint64, error) {
	if s == "" || !isNumeric(s) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}

func isNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// String formats v the way ParseVersion reads it.
func (v Version) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if len(v.Pre) > 0 {
		b.WriteString("-" + strings.Join(v.Pre, "."))
	}
	if v.Hash != "" {
		fmt.Fprintf(&b, "-%d-g%s", v.Commits, v.Hash)
	}
	if v.Dirty {
		b.WriteString("-dirty")
	}
	return b.String()
}

// Compare returns -1, 0 or +1 as v is older than, as old as, or newer than w. The order is
// semver's (core, then a pre-release before its release, identifiers compared field by field),
// then git describe's commit count. The commit hash and the dirty flag do not order: two
// builds that differ only there are not comparable, so they compare equal and installing one
// over the other needs Policy.Force.
func (v Version) Compare(w Version) int {
	for _, c := range [...][2]uint64{{v.Major, w.Major}, {v.Minor, w.Minor}, {v.Patch, w.Patch}} {
		if c[0] != c[1] {
			return cmp.Compare(c[0], c[1])
		}
	}
	if c := comparePre(v.Pre, w.Pre); c != 0 {
		return c
	}
	return cmp.Compare(v.Commits, w.Commits)
}

func comparePre(a, b []string) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1 // a release is newer than any of its pre-releases
	case len(b) == 0:
		return -1
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareIdent(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// compareIdent orders numeric identifiers numerically and below alphanumeric ones, which
// compare as ASCII (semver 2.0.0, rule 11).
func compareIdent(a, b string) int {
	an, bn := isNumeric(a), isNumeric(b)
	switch {
	case an && bn:
		x, _ := strconv.ParseUint(a, 10, 64)
		y, _ := strconv.ParseUint(b, 10, 64)
		return cmp.Compare(x, y)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}

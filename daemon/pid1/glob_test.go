package pid1

import (
	"path"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		// What modules.alias holds for the boards' devices.
		{"pci:v00008086d000010D3sv*sd*bc*sc*i*", "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00", true},
		{"pci:v00008086d000010D3sv*sd*bc*sc*i*", "pci:v00008086d000010D4sv00008086sd00000000bc02sc00i00", false},
		{"pci:v*d*sv*sd*bc01sc08i02*", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02", true},
		{"pci:v*d*sv*sd*bc01sc08i02*", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc06i01", false},
		{"virtio:d00000001v*", "virtio:d00000001v00001AF4", true},
		{"virtio:d00000001v*", "virtio:d00000002v00001AF4", false},
		{"usb:v*p*d*dc*dsc*dp*ic08isc06ip50in*", "usb:v46F4p0001d0000dc00dsc00dp00ic08isc06ip50in00", true},
		{"scsi:t-0x00*", "scsi:t-0x00", true},
		{"scsi:t-0x00*", "scsi:t-0x05", false},
		{"of:N*T*Csnps,dwmac-4.20aC*", "of:NethernetT(null)Csnps,dwmac-4.20aCsnps,dwmac", true},
		{"of:N*T*Csnps,dwmac-4.20a", "of:NethernetT(null)Csnps,dwmac-4.20aCsnps,dwmac", false},
		{"acpi*:PNP0A03:*", "acpi:PNP0A03:", true},
		// fnmatch's own rules.
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a*", "a", true},
		{"*", "", true},
		{"", "", true},
		{"", "a", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a*b", "abab", true},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[!a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[]]", "]", true},
		{"[!]]", "a", true},
		{"[a-]", "-", true},
		{"[ab", "[ab", true}, // no closing bracket: a literal '['
		{"[ab", "a", false},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\`, `a\`, true},
		{"a/b*", "a/bc/d", true}, // '/' is an ordinary character
		{"pci:*bc0Csc03i30*", "pci:v00001B36d0000000Dsv00000000sd00000000bc0Csc03i30", true},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// FuzzGlobMatch compares globMatch with path.Match where the two agree on the rules: ASCII
// (fnmatch in the C locale matches bytes, path.Match runes), no '/', no backslash, no
// "[!" (fnmatch's negation, a plain '!' to path.Match), and patterns path.Match accepts.
func FuzzGlobMatch(f *testing.F) {
	f.Add("pci:v*d*sv*sd*bc01sc08i02*", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02")
	f.Add("[a-c]*?x", "bbqx")
	f.Add("*a*a*a*", "aaxaax")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// Inputs outside the rules both share are no comparison, not a missing
		// prerequisite: they pass without a check.
		if strings.ContainsAny(pattern+s, `/\`) || !ascii(pattern+s) || strings.Contains(pattern, "[!") {
			return
		}
		want, err := path.Match(pattern, s)
		if err != nil {
			return
		}
		if got := globMatch(pattern, s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, path.Match says %v", pattern, s, got, want)
		}
	})
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

package plan

import (
	"fmt"
	"strings"
)

// Mode is a proxy mode, spelled as --proxy-mode, the metrics' mode label and the
// dashboard spell it. Each has its own plan package: plan/nft, plan/ipt, plan/ipvs.
type Mode string

// The proxy modes.
const (
	ModeNFTables Mode = "nftables"
	ModeIPTables Mode = "iptables"
	ModeIPVS     Mode = "ipvs"
)

// Modes lists every proxy mode, the default first.
var Modes = []Mode{ModeNFTables, ModeIPTables, ModeIPVS}

// ParseMode returns the mode s names, or an error that lists the supported ones.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("%q is not supported by this build (supported: %s)", s, strings.Join(names, ", "))
}

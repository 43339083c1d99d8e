package ipt

import (
	"fmt"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/xt"

	"github.com/edgegate/edgegate/daemon/model"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// Info structs google/nftables has no type for, laid out byte for byte as iptables-nft
// fills them (host byte order, padded to 8 bytes as the kernel demands).

func putU16(b []byte, off int, v uint16) { copy(b[off:], binaryutil.NativeEndian.PutUint16(v)) }
func putU32(b []byte, off int, v uint32) { copy(b[off:], binaryutil.NativeEndian.PutUint32(v)) }

// statisticInfo is xt_statistic_info: mode (0 = random), flags, the union holding the
// probability as a fraction of 2^31, and the kernel's private pointer. libxt_statistic's
// final check copies every-minus-packet into nth.count even in random mode, so the
// probability appears twice.
func statisticInfo(s iptplan.Statistic) *xt.Unknown {
	b := make(xt.Unknown, 24)
	p := iptplan.StatisticFraction(s.Probability)
	putU32(b, 4, p)
	putU32(b, 12, p)
	return &b
}

// xt_recent check_set bits and the name length.
const (
	recentCheck   = 0x01
	recentSet     = 0x02
	recentReap    = 0x20
	recentNameLen = 200
)

// recentInfo is xt_recent_mtinfo_v1: seconds, hit_count, check_set, invert, name[200],
// side (0 = --rsource), then the address mask; iptables' default mask keeps the whole
// address of the family.
func recentInfo(r iptplan.Recent, f model.Family) (*xt.Unknown, error) {
	if len(r.Name) >= recentNameLen {
		return nil, fmt.Errorf("recent list name %q is too long", r.Name)
	}
	b := make(xt.Unknown, 232)
	if r.Set {
		b[8] = recentSet
	} else {
		putU32(b, 0, r.Seconds)
		b[8] = recentCheck | recentReap
	}
	copy(b[10:], r.Name)
	mask := 4
	if f == model.IPv6 {
		mask = 16
	}
	for i := range mask {
		b[212+i] = 0xff
	}
	return &b, nil
}

// xt_sctp_info flag for a destination port match.
const sctpDestPorts = 0x02

// sctpInfo is xt_sctp_info: dpts[2], spts[2], the chunk map, chunk_match_type, four
// flag_info entries whose chunk types libxt_sctp initialises to 0xff, flag_count, flags,
// invflags.
func sctpInfo(port uint16) *xt.Unknown {
	b := make(xt.Unknown, 296)
	for i := range 4 {
		b[268+3*i] = 0xff
	}
	if port != 0 {
		putU16(b, 0, port)
		putU16(b, 2, port)
		putU32(b, 284, sctpDestPorts)
	}
	return &b
}

// markInfo is xt_mark_tginfo2 {mark, mask}: the new mark is (old & ^mask) ^ mark, so
// --or-mark M is M/M and --xor-mark M is M/0.
func markInfo(m iptplan.MarkTarget) *xt.Unknown {
	b := make(xt.Unknown, 8)
	putU32(b, 0, m.Mark)
	if !m.Xor {
		putU32(b, 4, m.Mark)
	}
	return &b
}

// rejectWith numbers the --reject-with types as ipt_REJECT and ip6t_REJECT do. tcp-reset is
// left out: the kernel accepts it only when the rule carries its protocol in the
// NFTA_RULE_COMPAT attribute, which iptables-nft sends for every "-p" but google/nftables
// only for rules with a tcp/udp/sctp match.
var rejectWith = map[model.Family]map[string]uint32{
	model.IPv4: {
		"icmp-net-unreachable": 0, "icmp-host-unreachable": 1, "icmp-proto-unreachable": 2,
		"icmp-port-unreachable": 3, "icmp-net-prohibited": 5, "icmp-host-prohibited": 6,
		"icmp-admin-prohibited": 8,
	},
	model.IPv6: {
		"icmp6-no-route": 0, "icmp6-adm-prohibited": 1, "icmp6-addr-unreachable": 3,
		"icmp6-port-unreachable": 4, "icmp6-policy-fail": 7, "icmp6-reject-route": 8,
	},
}

// rejectInfo is ipt_reject_info / ip6t_reject_info: one enum, padded.
func rejectInfo(with string, f model.Family) (*xt.Unknown, error) {
	n, ok := rejectWith[f][with]
	if !ok {
		return nil, fmt.Errorf("unknown %s reject type %q", f, with)
	}
	b := make(xt.Unknown, 8)
	putU32(b, 0, n)
	return &b, nil
}

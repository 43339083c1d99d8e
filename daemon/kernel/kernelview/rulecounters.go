package kernelview

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/view"
)

// Counters reads the counters of the rules of the chains that chains accepts in the tables
// of family f that tables accepts,
// each under its rule's comment (the plan labels every counter so, see plan.Counter; the
// same comment in several tables sums); missing tables have none. It lists the tables'
// chains, then dumps each chain's rules: one dump of the whole table costs the
// kernel time quadratic in its rules (it skips from the first rule again for every
// message buffer; 4.8 s at 10,000 Services x 10 endpoints), a chain's dump only that
// chain's. Messages are read through a fixed buffer and only comments and counters are
// decoded.
func (Kernel) Counters(f model.Family, tables, chains func(name string) bool) (map[string]view.BackendTraffic, error) {
	d, closeFn, err := openDumper()
	if err != nil {
		return nil, err
	}
	defer closeFn()
	family := byte(tableFamily(f))
	d.family = family
	var picked [][2]string // table, chain
	err = d.dump(unix.NFT_MSG_GETCHAIN, nil, func(data []byte) error {
		t, c, err := chainOf(data)
		if tables(t) && chains(c) {
			picked = append(picked, [2]string{t, c})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nftables %s: chains: %w", f, err)
	}
	out := map[string]view.BackendTraffic{}
	for _, tc := range picked {
		table, chain := tc[0], tc[1]
		err := d.chainRules(family, table, chain, func(data []byte) error {
			comment, c, ok, err := ruleCounter(data)
			if ok {
				sum := out[comment]
				out[comment] = view.BackendTraffic{Packets: sum.Packets + c.Packets, Bytes: sum.Bytes + c.Bytes}
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("nftables %s table %s chain %s: rules: %w", f, table, chain, err)
		}
	}
	return out, nil
}

// dumper runs nftables dump requests one after the other on one netlink socket (a socket
// runs one dump at a time).
type dumper struct {
	fd     int
	family byte
	buf    []byte
	seq    uint32
}

// dump sends one dump request of type msg with attributes attrs and hands each message's
// payload (struct nfgenmsg and attributes) to fn as it arrives.
func (d *dumper) dump(msg uint16, attrs []byte, fn func(data []byte) error) error {
	d.seq++
	n := unix.NLMSG_HDRLEN + 4 + len(attrs)
	req := make([]byte, unix.NLMSG_HDRLEN, n)
	binary.NativeEndian.PutUint32(req[0:], uint32(n))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|msg)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], d.seq)
	req = append(append(req, d.family, unix.NFNETLINK_V0, 0, 0), attrs...)
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(d.buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != d.seq {
				continue // what is left of an earlier dump that failed
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return errors.New("short error message")
				}
				if errno := -int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
					return unix.Errno(errno)
				}
				continue
			}
			if err := fn(m.Data); err != nil {
				return err
			}
		}
	}
}

// chainOf decodes a chain message: its table and name.
func chainOf(data []byte) (table, name string, err error) {
	ad, err := attrsOf(data)
	if err != nil {
		return "", "", err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			table = ad.String()
		case unix.NFTA_CHAIN_NAME:
			name = ad.String()
		}
	}
	return table, name, ad.Err()
}

// ruleCounter decodes one rule message (after its netlink header): its comment and the
// values of its first counter expression; ok is false when it lacks either.
func ruleCounter(data []byte) (comment string, c view.BackendTraffic, ok bool, err error) {
	var hasCounter bool
	comment, hasComment, err := decodeRule(data, func(e *netlink.AttributeDecoder) bool {
		c, hasCounter = counterExpr(e)
		return !hasCounter
	})
	if err != nil {
		return "", c, false, err
	}
	return comment, c, hasComment && hasCounter, nil
}

// decodeRule decodes a rule message (after its netlink header): its comment, and each of
// its expressions handed to expr in order until expr returns false.
func decodeRule(data []byte, expr func(e *netlink.AttributeDecoder) (more bool)) (comment string, hasComment bool, err error) {
	ad, err := attrsOf(data)
	if err != nil {
		return "", false, err
	}
	more := true
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_USERDATA:
			comment, hasComment = userComment(ad.Bytes())
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for more && list.Next() {
					list.Nested(func(e *netlink.AttributeDecoder) error {
						more = expr(e)
						return nil
					})
				}
				return nil
			})
		}
	}
	return comment, hasComment, ad.Err()
}

// counterExpr decodes one expression if it is a counter.
func counterExpr(e *netlink.AttributeDecoder) (c view.BackendTraffic, ok bool) {
	x := readExpr(e)
	if x.name != "counter" || x.data == nil {
		return c, false
	}
	d, err := netlink.NewAttributeDecoder(x.data)
	if err != nil {
		return c, false
	}
	d.ByteOrder = binary.BigEndian
	for d.Next() {
		switch d.Type() {
		case unix.NFTA_COUNTER_PACKETS:
			c.Packets = d.Uint64()
		case unix.NFTA_COUNTER_BYTES:
			c.Bytes = d.Uint64()
		}
	}
	return c, d.Err() == nil
}

// userComment finds the comment in a rule's user data: type-length-value records as
// nft(8) writes them, the comment (type 0) a NUL-terminated string.
func userComment(udata []byte) (string, bool) {
	for len(udata) >= 2 {
		typ, n := udata[0], int(udata[1])
		if len(udata) < 2+n {
			return "", false
		}
		if typ == 0 {
			return string(bytes.TrimRight(udata[2:2+n], "\x00")), true
		}
		udata = udata[2+n:]
	}
	return "", false
}

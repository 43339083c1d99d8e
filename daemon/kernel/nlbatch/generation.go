package nlbatch

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Generation reads the nftables ruleset generation of the current network namespace: the
// kernel counts every committed batch, whoever sent it, so an unchanged generation says
// that nothing was committed in between.
func Generation() (uint32, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return 0, fmt.Errorf("netlink: %w", err)
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}, // struct nfgenmsg
	})
	if err != nil {
		return 0, fmt.Errorf("get the nftables generation: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("nftables generation: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("nftables generation: the reply has no NFTA_GEN_ID")
}

// NextGeneration is the generation after g once one more batch is committed (the kernel
// skips 0 when the counter wraps).
func NextGeneration(g uint32) uint32 {
	if g++; g == 0 {
		g = 1
	}
	return g
}

package nft

import (
	"github.com/google/nftables"

	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// diffElems returns the elements to delete and to add; an element whose verdict changed
// is deleted and added again.
func diffElems(old, cur []nftplan.Elem) (del, add []nftplan.Elem) {
	have := make(map[nftplan.Key]nftplan.Verdict, len(old))
	for _, e := range old {
		have[e.Key] = e.Verdict
	}
	want := make(map[nftplan.Key]nftplan.Verdict, len(cur))
	for _, e := range cur {
		want[e.Key] = e.Verdict
		if v, ok := have[e.Key]; !ok || v != e.Verdict {
			add = append(add, e)
		}
	}
	for _, e := range old {
		if v, ok := want[e.Key]; !ok || v != e.Verdict {
			del = append(del, e)
		}
	}
	return del, add
}

// maxElemBytes bounds the elements of one netlink message. Their list is a single
// attribute, whose length field has 16 bits: google/nftables v0.3.0 sends a longer list
// as it is, the length wraps, and the kernel reads only the elements that fit in what is
// left, without an error (255 of 1000 service-ips elements once). Half the limit leaves
// room for the per-element attributes elementBytes does not count exactly.
const maxElemBytes = 32 << 10

// elementBytes over-estimates an element's encoded size.
func elementBytes(e nftables.SetElement) int {
	n := 64 + len(e.Key) + len(e.KeyEnd) + len(e.Val)
	if e.VerdictData != nil {
		n += 32 + len(e.VerdictData.Chain)
	}
	return n
}

// elementChunks splits elems into runs of at most maxElemBytes each.
func elementChunks(elems []nftables.SetElement) [][]nftables.SetElement {
	var out [][]nftables.SetElement
	start, size := 0, 0
	for i, e := range elems {
		n := elementBytes(e)
		if i > start && size+n > maxElemBytes {
			out = append(out, elems[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(elems) {
		out = append(out, elems[start:])
	}
	return out
}

// elementConn is what adding and deleting elements needs of a connection.
type elementConn interface {
	SetAddElements(s *nftables.Set, vals []nftables.SetElement) error
	SetDeleteElements(s *nftables.Set, vals []nftables.SetElement) error
}

// addElements adds elements to a set in messages the kernel reads whole.
func addElements(c elementConn, s *nftables.Set, elems []nftables.SetElement) error {
	for _, chunk := range elementChunks(elems) {
		if err := c.SetAddElements(s, chunk); err != nil {
			return err
		}
	}
	return nil
}

// deleteElements deletes elements from a set in messages the kernel reads whole.
func deleteElements(c elementConn, s *nftables.Set, elems []nftables.SetElement) error {
	for _, chunk := range elementChunks(elems) {
		if err := c.SetDeleteElements(s, chunk); err != nil {
			return err
		}
	}
	return nil
}

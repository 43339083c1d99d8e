package nft

// SplitFresh splits t over as many tables as s uses now, from scratch: what s.Split must
// give without the tables it split before.
func SplitFresh(s *Shards, t *Table) []*Table {
	return (&Shards{PerTable: s.PerTable, n: s.n}).splitAll(t)
}

// SplitChains and SplitMaps are the chains and maps a split spreads over the tables.
var SplitChains, SplitMaps = splitChains, splitMaps

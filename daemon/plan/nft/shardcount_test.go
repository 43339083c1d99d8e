package nft

import (
	"testing"
)

// TestShardCount: the dispatch is split in powers of two up to MaxShards once it outgrows
// a table, and goes back to fewer tables only once it would fit into a quarter of them.
func TestShardCount(t *testing.T) {
	s := &Shards{PerTable: 100}
	for _, c := range []struct{ rules, n int }{
		{0, 1}, {100, 1}, {101, 2}, {200, 2}, {201, 4}, {150, 4}, {101, 4}, {100, 1},
		{799, 8}, {250, 8}, {200, 2}, {1_000_000, MaxShards}, {6400, MaxShards}, {1600, 16},
	} {
		s.n = s.resize(c.rules)
		if s.n != c.n {
			t.Errorf("%d rules: %d tables, want %d", c.rules, s.n, c.n)
		}
	}
	if n := (&Shards{}).resize(1_000_000); n != 1 {
		t.Errorf("PerTable 0 split into %d tables", n)
	}
	for _, name := range []string{"edgegate-services-0", "edgegate-services-63"} {
		if !IsShardTable(name) {
			t.Errorf("IsShardTable(%q) = false", name)
		}
	}
	for _, name := range []string{"edgegate", "edgegate-ipvs", "edgegate-services-", "edgegate-services-x"} {
		if IsShardTable(name) {
			t.Errorf("IsShardTable(%q) = true", name)
		}
	}
}

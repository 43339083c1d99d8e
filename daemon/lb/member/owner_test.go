package member

import (
	"fmt"
	"net/netip"
	"testing"
)

func pool(n int) []netip.Addr {
	var out []netip.Addr
	a := netip.MustParseAddr("192.0.2.0")
	for range n {
		a = a.Next()
		out = append(out, a)
	}
	return out
}

// TestOwnersSpreadEvenly: 3000 addresses over 3 gateways land within 10% of a third each,
// and the answer does not depend on the order members are listed in.
func TestOwnersSpreadEvenly(t *testing.T) {
	addrs := pool(3000)
	got := Owners(addrs, []string{"gw-a", "gw-b", "gw-c"})
	again := Owners(addrs, []string{"gw-c", "gw-a", "gw-b"})
	count := map[string]int{}
	for a, o := range got {
		count[o]++
		if again[a] != o {
			t.Fatalf("%s: owner %s, or %s with the members listed in another order", a, o, again[a])
		}
	}
	for _, m := range []string{"gw-a", "gw-b", "gw-c"} {
		if c := count[m]; c < 900 || c > 1100 {
			t.Errorf("%s owns %d of 3000 addresses, want about 1000: %v", m, c, count)
		}
	}
}

// TestOwnersMoveOnlyWhatMust: a member leaving moves only its addresses; one joining takes
// addresses only for itself.
func TestOwnersMoveOnlyWhatMust(t *testing.T) {
	addrs := append(pool(500), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"))
	before := Owners(addrs, []string{"gw-a", "gw-b", "gw-c"})
	after := Owners(addrs, []string{"gw-a", "gw-c"})
	for a, o := range before {
		if o != "gw-b" && after[a] != o {
			t.Errorf("%s moved from %s to %s when gw-b left", a, o, after[a])
		}
		if after[a] == "gw-b" {
			t.Errorf("%s still owned by gw-b, which left", a)
		}
	}
	joined := Owners(addrs, []string{"gw-a", "gw-b", "gw-c", "gw-d"})
	moved := 0
	for a, o := range before {
		if joined[a] != o {
			moved++
			if joined[a] != "gw-d" {
				t.Errorf("%s moved from %s to %s when gw-d joined", a, o, joined[a])
			}
		}
	}
	if moved == 0 {
		t.Error("gw-d joined and took nothing")
	}
}

func TestOwnedAndEmpty(t *testing.T) {
	if got := Owners(pool(3), nil); len(got) != 0 {
		t.Errorf("no members own %v", got)
	}
	addrs := pool(20)
	all := 0
	for _, m := range []string{"x", "y"} {
		mine := Owned(addrs, []string{"x", "y"}, m)
		all += len(mine)
		for i := 1; i < len(mine); i++ {
			if !mine[i-1].Less(mine[i]) {
				t.Errorf("Owned(%s) not sorted: %v", m, mine)
			}
		}
	}
	if all != 20 {
		t.Errorf("x and y own %d of 20 addresses", all)
	}
}

func BenchmarkOwners(b *testing.B) {
	addrs := pool(1000)
	var members []string
	for i := range 8 {
		members = append(members, fmt.Sprintf("gw-%d", i))
	}
	for b.Loop() {
		Owners(addrs, members)
	}
}

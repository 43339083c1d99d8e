package pid1

// globMatch reports whether s matches the shell pattern, as fnmatch(3) without flags
// matches a device's modalias against modules.alias (what modprobe and udev do): '*' any
// run of characters, '?' any one, '[...]' a set ('!' or '^' first negates it, a-z is a
// range, a ']' first is a member), a backslash quotes the next character, and '/' is an
// ordinary character (unlike path.Match). A '[' with no closing ']' stands for itself.
func globMatch(pattern, s string) bool {
	// One star is enough to backtrack to: a later star only moves it forward.
	starP, starS := -1, 0
	p, i := 0, 0
	for i < len(s) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starS = p, i
				p++
				continue
			case '?':
				p++
				i++
				continue
			case '[':
				if ok, next, valid := matchSet(pattern, p, s[i]); valid {
					if ok {
						p, i = next, i+1
						continue
					}
					break
				}
				if s[i] == '[' {
					p++
					i++
					continue
				}
			case '\\':
				if p+1 < len(pattern) {
					if pattern[p+1] == s[i] {
						p, i = p+2, i+1
						continue
					}
					break
				}
				if s[i] == '\\' {
					p++
					i++
					continue
				}
			default:
				if c == s[i] {
					p++
					i++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last star take one more character and try again from there.
		starS++
		p, i = starP+1, starS
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchSet matches c against the bracket expression that starts at pattern[open]. valid is
// false when the expression has no closing ']'; next is the index after it.
func matchSet(pattern string, open int, c byte) (ok bool, next int, valid bool) {
	j := open + 1
	negate := false
	if j < len(pattern) && (pattern[j] == '!' || pattern[j] == '^') {
		negate = true
		j++
	}
	first := true
	for j < len(pattern) {
		lo := pattern[j]
		if lo == ']' && !first {
			return ok != negate, j + 1, true
		}
		first = false
		if lo == '\\' && j+1 < len(pattern) {
			j++
			lo = pattern[j]
		}
		j++
		hi := lo
		if j+1 < len(pattern) && pattern[j] == '-' && pattern[j+1] != ']' {
			hi = pattern[j+1]
			j += 2
			if hi == '\\' && j < len(pattern) {
				hi = pattern[j]
				j++
			}
		}
		if lo <= c && c <= hi {
			ok = true
		}
	}
	return false, 0, false
}

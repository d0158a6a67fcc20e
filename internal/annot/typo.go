package annot

// suggest returns the known key a word is probably a misspelling of. Short
// keys get a tighter bound: at distance 2, "on" or "env" would be near
// almost every short English word.
func suggest(word string) (string, bool) {
	best, bestDist := "", -1
	for _, key := range keys {
		limit := 2
		if len(key) <= 4 {
			limit = 1
		}
		if d := distance(word, key); d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = key, d
		}
	}
	return best, bestDist >= 0
}

// distance is the optimal string alignment (restricted Damerau-Levenshtein)
// distance between two ASCII strings: insertions, deletions, substitutions
// and swaps of adjacent characters each cost one, which covers the usual
// typing slips ("volum", "sanbdox", "retires").
func distance(a, b string) int {
	// Callers only ask whether the distance is at most 2, and it is at least
	// the difference in length, so any larger difference is reported as 3;
	// this also keeps a long word from costing a large table.
	if d := len(a) - len(b); d > 2 || d < -2 {
		return 3
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

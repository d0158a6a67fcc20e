package annot

import "github.com/hbollon/go-edlib"

// suggest returns the known key a word is probably a misspelling of. Short
// keys get a tighter bound: at distance 2, "on" or "env" would be near
// almost every short English word.
func suggest(word string) (string, bool) {
	best, bestDist := "", -1
	for _, key := range keys {
		limit := 2
		// "todos:" is two slips from "tools:", and a to-do list is prose.
		if len(key) <= 4 || key == "tools" {
			limit = 1
		}
		if d := distance(word, key); d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = key, d
		}
	}
	return best, bestDist >= 0
}

// distance is the optimal string alignment (restricted Damerau-Levenshtein)
// distance: insertions, deletions, substitutions and swaps of adjacent
// characters each cost one, which covers the usual typing slips ("volum",
// "sanbdox", "retires").
func distance(a, b string) int {
	// Callers only ask whether the distance is at most 2, and it is at least
	// the difference in length, so any larger difference is reported as 3;
	// this also keeps a long word from costing a large table.
	if d := len(a) - len(b); d > 2 || d < -2 {
		return 3
	}
	return edlib.OSADamerauLevenshteinDistance(a, b)
}

package voldiff

import (
	udiff "github.com/aymanbagabas/go-udiff"
)

// unified is the unified diff of before and after, labelled as git labels them (a/ and b/, or
// /dev/null for a side that does not exist), by go-udiff (whose line search is bounded).
func unified(fd *FileDiff, before, after string, context int) string {
	if before == after {
		return ""
	}
	from, to := "a/"+fd.Path, "b/"+fd.Path
	if fd.Old == nil {
		from = "/dev/null"
	}
	if fd.New == nil {
		to = "/dev/null"
	}
	text, err := udiff.ToUnified(from, to, before, udiff.Lines(before, after), context)
	if err != nil {
		// Cannot happen: the edits are udiff's own, of before.
		return ""
	}
	return text
}

package annot

// Known reports whether key (without its colon, e.g. "warm") is an annotation this build
// understands. A tool that writes functions for another build's features (host bench's rows
// for an annotation that may not be merged yet) asks it first: the parser ignores a word it
// does not know, and such a function would silently run without the feature.
func Known(key string) bool { return usage[key] != "" }

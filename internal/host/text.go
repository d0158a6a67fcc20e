package host

// abbreviate bounds text a caller sent before it goes into a log line, so a long header cannot
// flood the log.
func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package initbin

// The binaries and sources.txt are committed, so that `go build` and
// `go run ./cmd/host` need no generate step; regenerate them after changing
// the init (TestEmbeddedInitIsFresh fails until then).
//go:generate go run ../gen

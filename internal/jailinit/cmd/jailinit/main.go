// Command jailinit is the init of a default-network (egress proxy) jail;
// see package jailinit. The host embeds it prebuilt (package initbin):
// after changing it, run `go generate ./internal/jailinit/...`.
package main

import (
	"os"

	"github.com/agenthost/host/internal/jailinit"
)

func main() {
	os.Exit(jailinit.Main(os.Args[1:], os.Stderr))
}

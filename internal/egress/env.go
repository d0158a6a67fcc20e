package egress

import "github.com/agenthost/host/internal/jailinit"

// DefaultListen is where the in-jail forwarder (package jailinit) listens;
// Env points the proxy variables at it.
const DefaultListen = jailinit.DefaultListen

// Env returns the environment that sends a job's HTTP clients to the
// forwarder at listen (DefaultListen when empty). Clients disagree on
// names: curl reads https_proxy, HTTPS_PROXY and only lower-case http_proxy;
// Python's urllib and requests prefer lower case; Bun, Go, undici's
// EnvHttpProxyAgent (Claude Code) and Rust's reqwest (Codex) read either;
// curl, requests, httpx and git also fall back to ALL_PROXY. Node's own
// fetch and http modules ignore all of them unless NODE_USE_ENV_PROXY=1
// (Node 22.21+, 24.5+). NO_PROXY keeps the job's own loopback services
// direct; it names destinations only, so it does not bypass the proxy on
// the way to the proxy.
func Env(listen string) []string {
	if listen == "" {
		listen = DefaultListen
	}
	u := "http://" + listen
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"NODE_USE_ENV_PROXY=1",
	}
}

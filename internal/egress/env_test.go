package egress

import (
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	env := Env("")
	want := map[string]string{
		"HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
		"ALL_PROXY": "http://127.0.0.1:3128", "all_proxy": "http://127.0.0.1:3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY": "1",
	}
	if len(env) != len(want) {
		t.Errorf("Env has %d entries, want %d: %q", len(env), len(want), env)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if want[k] != v {
			t.Errorf("%s=%q, want %q", k, v, want[k])
		}
	}
	if got := Env("127.0.0.1:8080"); !slices.Contains(got, "HTTPS_PROXY=http://127.0.0.1:8080") {
		t.Errorf("Env(127.0.0.1:8080) = %q", got)
	}
}

package annot

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// satisfies the invariants the host relies on without re-checking.
func FuzzParse(f *testing.F) {
	seeds := []struct {
		js  bool
		src string
	}{
		{true, "// sandbox\n// volume: claude .claude\n\n// path -> content, fileset resource, that contains your CLAUDE.md, and skills\ntype AgentInstructions = Record<string, string>\n"},
		{false, "# sandbox\n# volume: agent-memory memory\n\nimport json, os\n"},
		{false, "#!/usr/bin/env bash\n# -*- coding: utf-8 -*-\n# type: ignore\n# noqa: E501\n# TODO: fix\n# sandbox\r\n"},
		{true, "// volume: $workspace-$name data\n// volume: c-$args[a.b] d/e\n// on: a.*.>\n// next: x.y\n// next: x.z\n"},
		{false, "# timeout: 1m\n# memory: 2Gi\n# network: proxy api.example.com *.github.com:443\n# retries: 3\n# concurrency: 4\n"},
		{false, "# env: A=b\n# env: T=$secret:gh/token\n# schedule: */5 * * * *\n"},
		{false, "# schedule: @every 10m\n# network: none\n"},
		{false, "# schedule: CRON_TZ=UTC 0 9 * * 1-5\n# network: host\n"},
		{false, "# schedule: */61 * * * *\n"},
		{false, "# schedule: 0 9-17/0 * JAN-dec sun,SAT\n"},
		{false, "# schedule: TZ=Europe/Paris 30-10 24 32 13 8\n"},
		{false, "# volum: a b\n# sandboxx\n# Volume: a b\n# one: two\n"},
		{true, "// volume: ab x\n// volume: cd x/y\n// volume: ef ../z\n/* end */\n"},
		{false, "# volume: a1 a\n# volume: b1 b\n# volume: c1 c\n# volume: d1 d\n# volume: e1 e\n# volume: f1 f\n# volume: g1 g\n# volume: h1 h\n# volume: i1 i\n# volume: j1 j\n# volume: k1 k\n"},
	}
	for _, s := range seeds {
		f.Add(s.js, []byte(s.src))
	}
	f.Fuzz(func(t *testing.T, js bool, src []byte) {
		file := "functions/f.py"
		if js {
			file = "functions/f/main.ts"
		}
		spec, err := Parse(file, src)
		if err != nil {
			checkErrors(t, file, spec, err)
			return
		}
		checkSpec(t, spec)
	})
}

func checkErrors(t *testing.T, file string, spec *Spec, err error) {
	if spec != nil {
		t.Fatalf("Parse returned a Spec and an error")
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error is not a join: %T", err)
	}
	for _, e := range joined.Unwrap() {
		var ae *Error
		if !errors.As(e, &ae) || ae.File != file || ae.Line < 1 || ae.Msg == "" {
			t.Fatalf("bad error %#v", e)
		}
	}
}

func checkSpec(t *testing.T, s *Spec) {
	if len(s.Volumes) > maxVolumes {
		t.Fatalf("%d volumes", len(s.Volumes))
	}
	for i, v := range s.Volumes {
		p := v.Path
		if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			t.Fatalf("bad volume path %q", p)
		}
		for _, w := range s.Volumes[:i] {
			if w.Path == p || strings.HasPrefix(p, w.Path+"/") || strings.HasPrefix(w.Path, p+"/") {
				t.Fatalf("overlapping volumes %q and %q", w.Path, p)
			}
		}
		if v.Line < 1 {
			t.Fatalf("volume line %d", v.Line)
		}
		if !strings.Contains(v.Name, "$") && !safeName.MatchString(v.Name) {
			t.Fatalf("unsafe literal volume name %q", v.Name)
		}
		// Whatever the payload, an expanded name is safe.
		for _, args := range []map[string]any{nil, {"a": "../..", "id": 1.5}, {"a": map[string]any{"b": "x"}}} {
			if got, err := v.Expand(Vars{Workspace: "ws", Function: "fn", Args: args}); err == nil && !safeName.MatchString(got) {
				t.Fatalf("Expand(%q) = unsafe %q", v.Name, got)
			}
		}
	}
	switch s.Network.Mode {
	case NetworkProxy:
		for _, h := range s.Network.Hosts {
			if checkHost(h) != nil || strings.ToLower(h) != h {
				t.Fatalf("bad host %q", h)
			}
		}
	case NetworkNone, NetworkHost:
		if len(s.Network.Hosts) > 0 {
			t.Fatalf("hosts %v with mode %s", s.Network.Hosts, s.Network.Mode)
		}
	default:
		t.Fatalf("bad network mode %q", s.Network.Mode)
	}
	for _, sub := range s.On {
		if checkSubject(sub, true) != nil {
			t.Fatalf("bad on subject %q", sub)
		}
	}
	for _, n := range s.Next {
		if checkSubject(n.Subject, false) != nil || strings.ContainsAny(n.Subject, "*> \t") {
			t.Fatalf("bad next subject %q", n.Subject)
		}
	}
	if s.Timeout < 0 || s.Memory != 0 && s.Memory < minMemory {
		t.Fatalf("timeout %v memory %d", s.Timeout, s.Memory)
	}
	if s.Retries < 0 || s.Retries > 100 || s.Concurrency < 0 || s.Concurrency > 1024 {
		t.Fatalf("retries %d concurrency %d", s.Retries, s.Concurrency)
	}
	if s.Schedule != "" {
		if _, err := ParseSchedule(s.Schedule); err != nil {
			t.Fatalf("schedule %q: %v", s.Schedule, err)
		}
	}
	var names []string
	for _, e := range s.Env {
		if !envName.MatchString(e.Name) || slices.Contains(reservedEnv, e.Name) || slices.Contains(names, e.Name) {
			t.Fatalf("bad env %+v", e)
		}
		names = append(names, e.Name)
		if e.Secret != "" && e.Value != secretPrefix+e.Secret || e.Secret == "" && strings.HasPrefix(e.Value, secretPrefix) {
			t.Fatalf("inconsistent secret %+v", e)
		}
	}
}

package runtimes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var bashCases = []scriptCase{
	{
		name: "ARG_ variables with key normalisation",
		file: "backup.sh",
		src: `#!/usr/bin/env bash
set -euo pipefail
echo "db=$ARG_DATABASE"
echo "user=$ARG_USER_NAME"
echo "dry=$ARG_DRY_RUN"
echo "keep=$ARG_KEEP_DAYS"
echo "ratio=$ARG_RATIO"
echo "big=$ARG_SNAPSHOT_ID"
echo "tables=${ARG_TABLES-unset} opts=${ARG_OPTIONS-unset} note=${ARG_NOTE-unset}"
echo "backup of $ARG_DATABASE scheduled"
`,
		payload: `{"database": "orders", "user-name": "ada", "dry.run": false, "keep_days": 7, "ratio": 0.25,
			"snapshot_id": 12345678901234567890, "tables": ["a", "b"], "options": {"gzip": true}, "note": null}`,
		want: `"backup of orders scheduled"`,
		stdoutHas: []string{
			"db=orders\n", "user=ada\n", "dry=false\n", "keep=7\n", "ratio=0.25\n",
			"big=12345678901234567890\n", "tables=unset opts=unset note=unset\n",
		},
	},
	{
		name: "payload on stdin",
		file: "count.sh",
		src: `#!/usr/bin/env bash
payload=$(cat)
echo "received: $payload" >&2
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"items": len(d["items"]), "first": d["items"][0]}))' "$payload"
`,
		payload:   `{"items": [{"id": 1}, {"id": 2}]}`,
		want:      `{"items": 2, "first": {"id": 1}}`,
		stderrHas: []string{`received: {"items": [{"id": 1}, {"id": 2}]}`},
	},
	{
		name: "JSON last line",
		file: "disk.sh",
		src: `#!/usr/bin/env bash
echo "checking disks..."
echo '{"mounts": 3, "healthy": true, "free_gb": [120.5, 33]}'
`,
		want: `{"mounts": 3, "healthy": true, "free_gb": [120.5, 33]}`,
	},
	{
		name: "number last line",
		file: "count.sh",
		src:  "#!/usr/bin/env bash\nls / | wc -l >/dev/null\necho 42\n",
		want: `42`,
	},
	{
		name: "plain text last line",
		file: "deploy.sh",
		src: `#!/usr/bin/env bash
echo "pulling image"
echo "deployed <web> & <worker> to ${ARG_ENV:-staging}"
echo
`,
		payload: `{"env": "prod"}`,
		want:    `"deployed <web> & <worker> to prod"`,
	},
	{
		name: "CRLF last line",
		file: "win.sh",
		src:  "#!/usr/bin/env bash\nprintf 'done\\r\\n'\n",
		want: `"done"`,
	},
	{
		name: "non-zero exit",
		file: "fail.sh",
		src: `#!/usr/bin/env bash
echo "connecting to $ARG_HOST"
echo "connection refused" >&2
exit 3
`,
		payload:   `{"host": "db.internal"}`,
		wantErr:   "script",
		errHas:    "exited with code 3",
		exitCode:  3,
		stdoutHas: []string{"connecting to db.internal"},
	},
	{
		name:     "set -e failure",
		file:     "strict.sh",
		src:      "#!/usr/bin/env bash\nset -e\ntest -f /definitely/not/here\necho unreachable\n",
		wantErr:  "script",
		exitCode: 1,
	},
	{
		name: "empty output",
		file: "touch.sh",
		src:  "#!/usr/bin/env bash\n: > /dev/null\n",
		want: `null`,
	},
	{
		name:    "sh without execute bit still runs",
		file:    "plain.sh",
		src:     "echo \"hi $ARG_NAME\"\n",
		payload: `{"name": "Ada"}`,
		want:    `"hi Ada"`,
	},
	{
		name: "exec: python shebang reading stdin",
		file: "transform",
		exec: true,
		src: `#!/usr/bin/env python3
import json, os, sys
payload = json.load(sys.stdin)
print("upper-casing", len(payload["words"]), "words", file=sys.stderr)
print(json.dumps({"words": [w.upper() for w in payload["words"]], "sep": os.environ["ARG_SEP"]}))
`,
		payload: `{"words": ["a", "b"], "sep": "-"}`,
		want:    `{"words": ["A", "B"], "sep": "-"}`,
	},
	{
		name:     "exec: sh shebang failing",
		file:     "check",
		exec:     true,
		src:      "#!/bin/sh\necho checking\nexit 5\n",
		wantErr:  "script",
		exitCode: 5,
	},
}

func TestBashAndExec(t *testing.T) {
	for _, c := range bashCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runScript(t, c, "")
			want := Bash
			if c.exec {
				want = Exec
			}
			if r.kind != want {
				t.Fatalf("Detect = %q, want %q", r.kind, want)
			}
			check(t, c, r)
		})
	}
}

func TestBuildArgEnv(t *testing.T) {
	payload := `{"name":"Ada","user-name":"ada","user_name":"other","Ünïcode key":1,"a.b.c":true,"":"empty",
		"big":12345678901234567890,"exp":1e3,"neg":-0.5,"nul":"a\u0000b","none":null,"list":[1],"obj":{"a":1},
		"quote":"say \"hi\"\nbye"}`
	var args map[string]any
	if err := json.Unmarshal([]byte(payload), &args); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ARG_A_B_C=true",
		"ARG_BIG=12345678901234567890",
		"ARG_EXP=1e3",
		"ARG_NAME=Ada",
		"ARG_NEG=-0.5",
		"ARG_QUOTE=say \"hi\"\nbye",
		"ARG_USER_NAME=ada", // "user-name" sorts before "user_name", so it wins
		"ARG__N_CODE_KEY=1",
	}

	for _, kind := range []Kind{Bash, Exec} {
		cmd, err := Build(kind, Paths{Script: "/job/script", ShimDir: "/shims"}, []byte(payload), args)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Clone(cmd.Env)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s env:\n got %q\nwant %q", kind, got, want)
		}
		if string(cmd.Stdin) != payload {
			t.Errorf("%s stdin = %q", kind, cmd.Stdin)
		}
	}

	// Without a raw payload the decoded args are used.
	cmd, err := Build(Bash, Paths{Script: "/job/s.sh", ShimDir: "/shims"}, nil, map[string]any{"count": 3.0, "ok": true, "s": "x"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(cmd.Env)
	if want := []string{"ARG_COUNT=3", "ARG_OK=true", "ARG_S=x"}; !slices.Equal(cmd.Env, want) {
		t.Errorf("env from args = %q, want %q", cmd.Env, want)
	}
	if string(cmd.Stdin) != "{}" {
		t.Errorf("stdin for empty payload = %q, want {}", cmd.Stdin)
	}
}

func TestBuild(t *testing.T) {
	p := Paths{Script: "/job/src/main.ts", ShimDir: "/shims", IODir: "/io"}
	tests := []struct {
		kind    Kind
		paths   Paths
		argv    string
		envHas  []string
		stdin   bool
		wantErr string
	}{
		{kind: Python, paths: p, argv: "python3 -s -B /shims/shim.py /job/src/main.ts /io", envHas: []string{"PYTHONUTF8=1"}},
		{kind: Bun, paths: p, argv: "bun --no-install --no-env-file /shims/shim.mjs /job/src/main.ts /io",
			envHas: []string{"BUN_RUNTIME_TRANSPILER_CACHE_PATH=0", "NO_COLOR=1"}},
		{kind: Bash, paths: p, argv: "bash /shims/bash.sh /job/src/main.ts", stdin: true},
		{kind: Exec, paths: p, argv: "/job/src/main.ts", stdin: true},
		{kind: Bash, paths: Paths{Script: "/s.sh", ShimDir: "/shims"}, argv: "bash /shims/bash.sh /s.sh", stdin: true},
		{kind: Bash, paths: Paths{Script: "/s.sh"}, wantErr: "ShimDir"},
		{kind: Python, paths: Paths{Script: "/s.py"}, wantErr: "ShimDir"},
		{kind: Bun, paths: Paths{Script: "/s.ts", ShimDir: "/shims"}, wantErr: "IODir"},
		{kind: Bash, paths: Paths{}, wantErr: "Script is empty"},
		{kind: "ruby", paths: p, wantErr: `unknown runtime "ruby"`},
	}
	payload := []byte(`{"secret":"do-not-leak"}`)
	for _, tt := range tests {
		t.Run(string(tt.kind)+"/"+tt.argv+tt.wantErr, func(t *testing.T) {
			cmd, err := Build(tt.kind, tt.paths, payload, map[string]any{"secret": "do-not-leak"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cmd.Argv, " "); got != tt.argv {
				t.Errorf("argv = %q, want %q", got, tt.argv)
			}
			if strings.Contains(strings.Join(cmd.Argv, " "), "do-not-leak") {
				t.Error("payload leaked into argv")
			}
			for _, e := range tt.envHas {
				if !slices.Contains(cmd.Env, e) {
					t.Errorf("env %q lacks %q", cmd.Env, e)
				}
			}
			if (cmd.Stdin != nil) != tt.stdin {
				t.Errorf("stdin = %q", cmd.Stdin)
			}
		})
	}
}

// TestArgEnvBound: a 200 KB argument became ARG_<KEY> and every external command of the
// script failed with "Argument list too long". ARG_ variables are set up to MaxArgEnv each
// and MaxArgEnvTotal together; the rest are left to stdin and reported.
func TestArgEnvBound(t *testing.T) {
	big := strings.Repeat("x", MaxArgEnv+1)
	fits := strings.Repeat("y", MaxArgEnv)
	many := map[string]any{}
	for i := range MaxArgEnvTotal/MaxArgEnv + 1 {
		many[fmt.Sprintf("k%02d", i)] = fits
	}
	cases := []struct {
		name        string
		args        map[string]any
		wantSet     []string
		wantOmitted []string // name:total
	}{
		{"small values", map[string]any{"a": "1", "b": 2}, []string{"ARG_A", "ARG_B"}, nil},
		{"exactly the bound", map[string]any{"a": fits}, []string{"ARG_A"}, nil},
		{"one byte over", map[string]any{"big": big, "small": "hi"}, []string{"ARG_SMALL"}, []string{"ARG_BIG:false"}},
		{"together over the total", many, []string{"ARG_K00", "ARG_K01", "ARG_K02", "ARG_K03", "ARG_K04", "ARG_K05", "ARG_K06"}, []string{"ARG_K07:true", "ARG_K08:true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			payload, _ := json.Marshal(c.args)
			cmd, err := Build(Bash, Paths{Script: "/s.sh", ShimDir: "/shims"}, payload, c.args)
			if err != nil {
				t.Fatal(err)
			}
			var set []string
			total := 0
			for _, kv := range cmd.Env {
				name, _, _ := strings.Cut(kv, "=")
				set = append(set, name)
				total += len(kv)
			}
			if !slices.Equal(set, c.wantSet) {
				t.Errorf("set %v, want %v", set, c.wantSet)
			}
			if total > MaxArgEnvTotal {
				t.Errorf("the ARG_ variables hold %d bytes, over %d", total, MaxArgEnvTotal)
			}
			var omitted []string
			for _, o := range cmd.Omitted {
				omitted = append(omitted, fmt.Sprintf("%s:%v", o.Name, o.Total))
				if r := o.Reason(); !strings.Contains(r, o.Name+" is not set") || !strings.Contains(r, "stdin") || !strings.Contains(r, strconv.Itoa(o.Bytes)) {
					t.Errorf("reason %q does not say which variable, how big, and where to read it", r)
				}
			}
			if !slices.Equal(omitted, c.wantOmitted) {
				t.Errorf("omitted %v, want %v", omitted, c.wantOmitted)
			}
			if !bytes.Equal(cmd.Stdin, payload) {
				t.Error("the payload on stdin is not the whole payload")
			}
		})
	}
}

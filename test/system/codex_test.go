package system_test

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/openaitest"
)

// The seed's Codex skeleton (functions/codex.ts), run with the real Codex CLI against a local
// server that speaks the OpenAI Responses API. Codex keeps its state in .codex, the codex-state
// volume: the second run finds the first run's there (Codex's installation id, the first
// session's rollout), a shell command the model asks for runs inside the jail, and Codex
// resumes the last session from the volume.
func TestCodexSkeletonKeepsItsStateInTheVolume(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/codex"); err != nil {
		t.Skip("SKIPPED LOUDLY: the Codex CLI is not installed at /usr/bin/codex; scripts/setup should install it (npm install -g @openai/codex@0.169.0)")
	}
	const key = "sk-openai-test-key-0123456789"
	// The function as shipped: a sandboxed job with .codex in the codex-state volume, and the key
	// from the secret store.
	fn, err := functions.LoadPath("../../functions/codex.ts")
	if err != nil {
		t.Fatal(err)
	}
	if s := fn.Spec; !s.Sandbox || len(s.Volumes) != 1 || s.Volumes[0].Name != "codex-state" || s.Volumes[0].Path != ".codex" ||
		len(s.Env) != 1 || s.Env[0].Name != "OPENAI_API_KEY" || s.Env[0].Sealed == nil || s.Env[0].Sealed.Ref != "openai" {
		t.Fatalf("codex.ts annotations: %+v", s)
	}

	// The fake model echoes the prompt; asked "Run: <command>", it has Codex run the command
	// with its exec tool (JavaScript calling exec_command) and answers with the output.
	api, err := openaitest.Start(func(r openaitest.Request) openaitest.Answer {
		if outs := r.TurnToolOutputs(); len(outs) > 0 {
			return openaitest.Answer{Text: "Ran: " + outs[len(outs)-1].Output}
		}
		if cmd, ok := strings.CutPrefix(r.LastUserText(), "Run: "); ok {
			js := fmt.Sprintf("const r = await tools.exec_command({cmd: %q}); text(r.output)", cmd)
			return openaitest.Answer{Call: &openaitest.Call{Name: "exec", Custom: true, Input: js}}
		}
		return openaitest.Answer{Text: "You said: " + r.LastUserText()}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	src, err := os.ReadFile("../../functions/codex.ts")
	if err != nil {
		t.Fatal(err)
	}
	// The function as written, its key sealed for api.openai.com, which the host's proxy pins to
	// the test's server (serving TLS with a certificate the proxy is told to trust).
	script := string(src)
	// The same function resuming Codex's last session instead of starting one, as a user would
	// to continue: it shares the volume.
	resume := strings.Replace(script, "`codex exec ", "`codex exec resume --last ", 1)
	if resume == script {
		t.Fatal("codex.ts does not run `codex exec`")
	}
	h := hosttest.New(t, map[string]string{"codex.ts": script, "codex-resume.ts": resume}, pinAPI(t, api, "api.openai.com"))
	h.SetSecret("openai", `"`+key+`"`)

	// What each run sent: its session, and the installation id Codex keeps in CODEX_HOME.
	type sent struct{ session, installation string }
	runSent := func(from int) sent {
		t.Helper()
		reqs := api.Requests()[from:]
		if len(reqs) == 0 {
			t.Fatal("the run reached no API")
		}
		var s sent
		for _, r := range reqs {
			if got := r.Header.Get("Authorization"); got != "Bearer "+key {
				t.Fatalf("%s %s: Authorization %q", r.Method, r.Path, got)
			}
			meta, _ := r.Body["client_metadata"].(map[string]any)
			inst, _ := meta["x-codex-installation-id"].(string)
			if s.session == "" {
				s = sent{r.Header.Get("Session-Id"), inst}
			}
			if r.Header.Get("Session-Id") != s.session || inst != s.installation || inst == "" {
				t.Fatalf("one run, several sessions or installations: %q %q, then %q %q", s.session, s.installation, r.Header.Get("Session-Id"), inst)
			}
		}
		return s
	}

	// 1. A prompt the skeleton's "${prompt}" would have broken: it reaches Codex as written.
	first := "What is the fastest OSS workflow engine? Answer in \"quotes\", without $HOME or `uname`."
	if got := hosttest.Decode[string](t, h.Call("codex", jsonPrompt(first)).Data); got != "You said: "+first {
		t.Fatalf("first run: %q", got)
	}
	s1 := runSent(0)

	// 2. The second run finds the first run's state in the volume: Codex reuses the installation
	// id it wrote there. The model has it run a command, which runs in the jail (as uid 65534,
	// in /job) since Codex's own sandbox is off, and sees the first session's rollout.
	n := len(api.Requests())
	second := "Run: id -u; pwd; ls -R .codex/sessions; echo key=$OPENAI_API_KEY"
	out := hosttest.Decode[string](t, h.Call("codex", jsonPrompt(second)).Data)
	if !strings.HasPrefix(out, "Ran: ") || !strings.Contains(out, "\n65534\n/job\n") || !strings.Contains(out, s1.session+".jsonl") {
		t.Fatalf("second run: %q (first session %s)", out, s1.session)
	}
	// What Codex's commands see is the placeholder; the API got the key (runSent checks).
	if !placeholderRE.MatchString(out) || strings.Contains(out, key) {
		t.Fatalf("the command saw OPENAI_API_KEY as %q; want the sealed placeholder", out)
	}
	s2 := runSent(n)
	if s2.installation != s1.installation || s2.session == s1.session {
		t.Fatalf("second run sent %+v, first %+v: Codex did not find its state", s2, s1)
	}
	if got := strings.TrimSpace(h.ReadVolume(nil, "codex-state", "installation_id")); got != s1.installation {
		t.Fatalf("the volume's installation_id is %q, Codex sent %q", got, s1.installation)
	}
	// Both sessions are in the volume, the first with its turn.
	rollouts := map[string]string{}
	tr := tar.NewReader(strings.NewReader(h.ReadVolume(nil, "codex-state", "sessions")))
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{s1.session, s2.session} {
			if strings.HasSuffix(hd.Name, "-"+s+".jsonl") {
				rollouts[s] = string(b)
			}
		}
	}
	if r := rollouts[s1.session]; !strings.Contains(r, jsonText(first)) || !strings.Contains(r, jsonText("You said: "+first)) {
		t.Fatalf("the first session's rollout in the volume lacks its turn (%d bytes)", len(r))
	}
	if r := rollouts[s2.session]; !strings.Contains(r, jsonText(second)) {
		t.Fatalf("the second session's rollout in the volume lacks its turn (%d bytes)", len(r))
	}

	// 3. Codex itself reads its state back: `codex exec resume --last` continues the second
	// session, and the API sees its earlier turns.
	n = len(api.Requests())
	third := "What did I ask you before?"
	if got := hosttest.Decode[string](t, h.Call("codex-resume", jsonPrompt(third)).Data); got != "You said: "+third {
		t.Fatalf("resumed run: %q", got)
	}
	s3 := runSent(n)
	last := api.Requests()[len(api.Requests())-1]
	if s3.session != s2.session || s3.installation != s1.installation || !strings.Contains(last.Text(), second) ||
		!strings.Contains(last.Text(), "Ran: ") || len(last.ToolOutputs()) != 1 {
		t.Fatalf("the resumed run sent session %s (second run's: %s) and did not replay the second run's turns:\n%.2000s", s3.session, s2.session, last.Text())
	}

	// The key stays out of the volume.
	whole := h.ReadVolume(nil, "codex-state", "")
	if strings.Contains(whole, key) {
		t.Fatal("the volume holds the API key")
	}
}

func jsonPrompt(p string) string { return `{"prompt":` + jsonText(p) + `}` }

// jsonText is s as a JSON string, as it appears in a payload or a rollout line.
func jsonText(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

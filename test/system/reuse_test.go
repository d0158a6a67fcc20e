package system_test

import (
	"fmt"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// Reused jails (reuse:) end to end, through a host on a real NATS and the real jail: the
// messages of one jail get a placeholder of their own for a sealed secret (a placeholder an
// earlier message kept in module state is not the current one), and a volume checked out and
// committed per message, beside a /job that is empty of everything else.
func TestReuseSealedAndVolumes(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"rsealed.py": "# sandbox\n# reuse: 10\n# env: K=$sealed:anthropic.apiKey@api.example.com\n" +
			"import os\nPROC = os.urandom(6).hex()\nKEPT = []\n\n" +
			"def main():\n    k = os.environ['K']\n    kept = list(KEPT)\n    KEPT.append(k)\n    return {'k': k, 'kept': kept, 'proc': PROC}\n",
		"rvol.py": "# sandbox\n# reuse: 10\n# volume: reuse-vol data\n" +
			"import os\nPROC = os.urandom(6).hex()\n\n" +
			"def main():\n    job = sorted(os.listdir('/job'))\n    try:\n        n = int(open('/job/data/n').read())\n    except FileNotFoundError:\n        n = 0\n" +
			"    open('/job/data/n', 'w').write(str(n + 1))\n    open('/job/scratch', 'w').write('x')\n    return {'n': n, 'job': job, 'proc': PROC}\n",
	})
	h.SetSecret("anthropic", `{"apiKey":"`+realKey+`"}`)

	type sealedSeen struct {
		K    string   `json:"k"`
		Kept []string `json:"kept"`
		Proc string   `json:"proc"`
	}
	var proc string
	for i := range 4 {
		reply := h.Call("rsealed", `{}`)
		if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
			t.Fatalf("call %d: %s: %s", i, st, reply.Data)
		}
		r := hosttest.Decode[sealedSeen](t, reply.Data)
		if rec := h.Record(reply.Header.Get(bus.HeaderJobID)); rec.Served != "reuse" {
			t.Fatalf("call %d was served %q, want reuse", i, rec.Served)
		}
		if !placeholderRE.MatchString(r.K) {
			t.Fatalf("call %d: K is %q, want a placeholder", i, r.K)
		}
		if i == 0 {
			proc = r.Proc
		}
		if r.Proc != proc || len(r.Kept) != i {
			t.Fatalf("call %d ran in another jail (%s, then %s; %d kept): the jail was not reused", i, proc, r.Proc, len(r.Kept))
		}
		for _, old := range r.Kept {
			if old == r.K {
				t.Fatalf("call %d got placeholder %s, which an earlier message had: a placeholder is the message's own", i, r.K)
			}
		}
	}

	type volSeen struct {
		N    int      `json:"n"`
		Job  []string `json:"job"`
		Proc string   `json:"proc"`
	}
	for i := range 3 {
		reply := h.Call("rvol", `{}`)
		if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
			t.Fatalf("volume call %d: %s: %s", i, st, reply.Data)
		}
		r := hosttest.Decode[volSeen](t, reply.Data)
		if i == 0 {
			proc = r.Proc
		}
		if r.N != i {
			t.Fatalf("volume call %d read n=%d: the previous message's commit is not in its checkout", i, r.N)
		}
		if fmt.Sprint(r.Job) != "[data]" {
			t.Fatalf("volume call %d sees /job %v, want only the volume: an earlier message's files are left", i, r.Job)
		}
		if r.Proc != proc {
			t.Fatalf("volume call %d ran in another jail", i)
		}
		rec := h.Record(reply.Header.Get(bus.HeaderJobID))
		if len(rec.Volumes) != 1 || rec.Volumes[0].Committed == 0 {
			t.Fatalf("volume call %d: record volumes %+v, want one committed", i, rec.Volumes)
		}
	}
}

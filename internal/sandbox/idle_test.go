package sandbox

import (
	"context"
	"os"
	"testing"
)

// A run started Idle runs at nice 19, the command and what it starts included, until Wake puts
// every process of it back at 0; a run woken before its jail is built is never lowered.
func TestIdleUntilWake(t *testing.T) {
	b := newTestBwrap(t)
	requireCgroups(t, b)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: lowering a jail's priority and raising it back takes root")
	}
	for _, c := range []struct {
		name      string
		wakeFirst bool
		want      string
	}{
		{"lowered until woken", false, "19\n0\n"},
		{"woken before the start", true, "0\n0\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			idle := &Idle{}
			if c.wakeFirst {
				idle.Wake()
			}
			stdinR, stdinW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdinR.Close()
			// The first niceness printed, the test wakes the run and lets the script go on.
			out := &markerWriter{marker: "\n", fn: func() {
				idle.Wake()
				stdinW.Write([]byte("go\n"))
				stdinW.Close()
			}}
			spec := &Spec{Argv: bash("nice; read -r go; nice"), WorkDir: testDir(t, b, true), Stdin: stdinR, Stdout: out, Idle: idle}
			res, err := b.Run(context.Background(), spec)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v %v", res, err)
			}
			if got := out.String(); got != c.want {
				t.Fatalf("niceness %q, want %q", got, c.want)
			}
		})
	}
}

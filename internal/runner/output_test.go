package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/secrets"
)

func TestLineWriter(t *testing.T) {
	var lines []string
	sink := func(stream string, line []byte) { lines = append(lines, stream+":"+string(line)) }
	budget := newOutputBudget(1 << 20)
	w := newLineWriter("stdout", sink, budget, 32, 8)
	for _, chunk := range []string{"one\ntw", "o\r\n\n", "   \n", "last line no newline"} {
		w.Write([]byte(chunk))
	}
	w.Close()
	want := []string{"stdout:one", "stdout:two", "stdout:", "stdout:   ", "stdout:last line no newline"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("lines = %q", lines)
	}
	if string(w.last) != "last line no newline" || w.lastOverflow {
		t.Fatalf("last = %q", w.last)
	}
	if w.tail.String() != " newline" {
		t.Fatalf("tail = %q", w.tail.String())
	}
}

func TestLineWriterBoundsWhatItKeeps(t *testing.T) {
	budget := newOutputBudget(10)
	var published int
	w := newLineWriter("stdout", func(string, []byte) { published++ }, budget, 16, 4)
	w.Write([]byte(strings.Repeat("x", 100) + "\n"))
	w.Write([]byte("ok\n"))
	w.Close()
	if !(string(w.last) == "ok" && !w.lastOverflow) {
		t.Fatalf("last = %q overflow %v", w.last, w.lastOverflow)
	}
	// The 100-byte line is kept as 16 bytes (+1 for its newline), over the budget of 10: it and
	// everything after it are dropped and counted, so the log never has holes in the middle.
	if _, dropped, _ := budget.truncated(); published != 0 || dropped != 17+3 {
		t.Fatalf("published %d, dropped %d", published, dropped)
	}
	w2 := newLineWriter("stdout", nil, newOutputBudget(0), 16, 4)
	w2.Write([]byte(strings.Repeat("y", 40)))
	w2.Close()
	if !w2.lastOverflow || len(w2.last) != 16 {
		t.Fatalf("overflowing last line: %q %v", w2.last, w2.lastOverflow)
	}
}

func TestOutputBudgetTruncation(t *testing.T) {
	cases := []struct {
		name          string
		max           int64
		lines         []string
		wantPublished int64
		wantDropped   int64
	}{
		{"under the cap", 100, []string{"abc", "de"}, 7, 0},
		{"exactly the cap", 7, []string{"abc", "de"}, 7, 0},
		{"cut in the middle", 6, []string{"abc", "de", "f"}, 4, 5},
		{"a short line after a cut one stays cut", 5, []string{"abc", "defgh", "i"}, 4, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newOutputBudget(c.max)
			var logged []string
			w := newLineWriter("stdout", func(_ string, l []byte) { logged = append(logged, string(l)) }, b, 64, 0)
			for _, l := range c.lines {
				w.Write([]byte(l + "\n"))
			}
			published, dropped, line := b.truncated()
			if published != c.wantPublished || dropped != c.wantDropped {
				t.Fatalf("published %d dropped %d, want %d and %d (logged %q)", published, dropped, c.wantPublished, c.wantDropped, logged)
			}
			if dropped == 0 {
				if line != nil {
					t.Fatalf("a log that was not cut got a truncation line %q", line)
				}
				return
			}
			want := fmt.Sprintf("[host] output truncated after %d bytes; ", c.wantPublished)
			if !strings.HasPrefix(string(line), want) || !strings.Contains(string(line), fmt.Sprintf("--max-output-bytes %d", c.max)) {
				t.Fatalf("truncation line %q, want it to start %q and name the cap", line, want)
			}
		})
	}
}

// The runtime's end line (runtimes.EndMarker) is not output: it is neither logged nor the last
// line, what follows it is dropped, and once both streams had theirs the watch sends the code.
func TestLineWriterEndLine(t *testing.T) {
	cases := []struct {
		name            string
		stdout, stderr  string
		wantLines, last string
		wantCode        int // -1: nothing sent
	}{
		{"both streams", "one\n\x1ehost-end 3\nafter\n", "oops\n\x1ehost-end 3\n", "stdout:one|stderr:oops", "one", 3},
		{"last output without a newline", "result\x1ehost-end 0\n", "\x1ehost-end 0\n", "stdout:result", "result", 0},
		{"one stream only", "one\n\x1ehost-end 0\n", "no end\n", "stdout:one|stderr:no end", "one", -1},
		{"not a code", "\x1ehost-end x\n", "\x1ehost-end 0\n", "stdout:\x1ehost-end x", "\x1ehost-end x", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lines []string
			sink := func(stream string, line []byte) { lines = append(lines, stream+":"+string(line)) }
			finished := make(chan int, 1)
			end := &endWatch{}
			end.bind(func(code int) { finished <- code })
			budget := newOutputBudget(1 << 20)
			out := newLineWriter("stdout", sink, budget, 64, 64)
			errw := newLineWriter("stderr", sink, budget, 64, 64)
			out.end, errw.end = end, end
			out.Write([]byte(c.stdout))
			errw.Write([]byte(c.stderr))
			out.Close()
			errw.Close()
			if got := strings.Join(lines, "|"); got != c.wantLines {
				t.Errorf("lines %q, want %q", got, c.wantLines)
			}
			if string(out.last) != c.last {
				t.Errorf("last %q, want %q", out.last, c.last)
			}
			code := -1
			select {
			case code = <-finished:
			default:
			}
			if code != c.wantCode {
				t.Errorf("finished with %d, want %d", code, c.wantCode)
			}
		})
	}
}

// TestReadyLine: a warm jail's ready line is heard however its bytes arrive, before a job takes
// the jail, and never reaches the job's log, even when it is read after the hand-over.
func TestReadyLine(t *testing.T) {
	ready := runtimes.ReadyMarker + "\n"
	cases := []struct {
		name   string
		writes []string
		heard  bool
	}{
		{"alone", []string{ready}, true},
		{"after top-level output", []string{"top\n" + ready}, true},
		{"split across writes", []string{"top\n\x1eho", "st-rea", "dy\n"}, true},
		{"past the kept output", []string{strings.Repeat("x", warmEarlyOutput+10), "\n" + ready}, true},
		{"marker without its newline", []string{"top\n" + runtimes.ReadyMarker}, false},
		{"another line", []string{"\x1ehost-readyish\n"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &handoffWriter{ready: make(chan struct{})}
			for _, w := range c.writes {
				h.Write([]byte(w))
			}
			select {
			case <-h.ready:
				if !c.heard {
					t.Fatal("heard a ready line that was not written")
				}
			default:
				if c.heard {
					t.Fatal("the ready line was not heard")
				}
			}
		})
	}

	// Taken before it was ready, a jail no longer loads for the pool: its start slot is free.
	early := &handoffWriter{ready: make(chan struct{})}
	early.Write([]byte("top\n"))
	early.attach(io.Discard)
	select {
	case <-early.ready:
	default:
		t.Fatal("a jail taken before its ready line still holds its start slot")
	}

	var lines []string
	w := newLineWriter("stdout", func(_ string, l []byte) { lines = append(lines, string(l)) }, newOutputBudget(1<<20), 1<<10, 64)
	h := &handoffWriter{ready: make(chan struct{})}
	h.Write([]byte("top\n" + ready))
	h.attach(w)
	h.Write([]byte("no newline" + ready + ready + "job\n"))
	w.Close()
	if got, want := strings.Join(lines, "|"), "top|no newline|job"; got != want {
		t.Fatalf("job's lines = %q, want %q", got, want)
	}
}

// TestLineWriterCutsAfterRedaction: the 16 KiB line cap, the kept line's own bound, the log
// budget and the stderr tail used to cut first and redact after, which left a part of a secret
// that no pattern matched ("…ntoken-9" in the log, a tail starting "oken-9f3a"). Each bound
// applies to the redacted text.
func TestLineWriterCutsAfterRedaction(t *testing.T) {
	const tok = "apintoken-9f3a5c"
	r := secrets.NewRedactor()
	r.Add(json.RawMessage(`"` + tok + `"`))
	red := redactor{r: r}
	noPart := func(t *testing.T, where, text string) {
		t.Helper()
		for i := 0; i+3 <= len(tok); i++ {
			if strings.Contains(text, tok[i:i+3]) {
				t.Fatalf("%s holds %q of the secret: …%s", where, tok[i:i+3], text[max(0, len(text)-80):])
			}
		}
	}
	cases := []struct {
		name  string
		write string
	}{
		{"a secret across the 16 KiB cap", strings.Repeat("x", maxLogLine-6) + tok + " rest\n"},
		{"a secret across the kept line's bound", strings.Repeat("x", stderrLine-6) + tok + " rest\n"},
		{"a secret across the tail's start", tok + strings.Repeat("y", stderrTail-6) + "\n"},
		{"a secret at the end of an unfinished line", strings.Repeat("z", stderrLine-3) + tok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lines []string
			budget := newOutputBudget(1 << 20)
			w := newLineWriter("stderr", func(_ string, l []byte) { lines = append(lines, string(l)) }, budget, stderrLine, stderrTail)
			w.redact = red
			w.Write([]byte(c.write))
			w.Close()
			published := 0
			for _, l := range lines {
				noPart(t, "a log line", l)
				if len(l) > maxLogLine+64 {
					t.Errorf("a log line of %d bytes", len(l))
				}
				published += len(l) + 1
			}
			if got, _, _ := budget.truncated(); got != int64(published) {
				t.Errorf("the budget counted %d bytes, %d were published", got, published)
			}
			tail := w.tail.redacted(red)
			noPart(t, "the tail", tail)
			if len(tail) > stderrTail {
				t.Errorf("a tail of %d bytes", len(tail))
			}
		})
	}
}

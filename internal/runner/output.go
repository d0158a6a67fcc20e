package runner

import (
	"bytes"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/secrets"
)

// lineWriter splits a process's output into lines for the log sink, keeps the last non-empty
// line (a bash function's result) and a tail of the stream, and bounds everything it keeps: a
// job can print gigabytes and the host holds at most a few buffers of fixed size.
//
// Every bound that cuts what is shown (the line cap, the log budget, the tail) applies to the
// redacted text: cutting first would split a secret, and no pattern matches half of one.
type lineWriter struct {
	stream string
	sink   jobtype.LineFunc
	budget *outputBudget
	// redact hides the job's secrets in each line before it is measured and shown.
	redact redactor
	// end, when not nil, is told the runtime's end line (runtimes.EndMarker) on this stream.
	end *endWatch

	// mu: once a run ended on its end lines, what is left of the jail may still write while
	// the runner reads the writer.
	mu    sync.Mutex
	ended bool // the end line or Close was seen: later output is not the job's

	// maxLine bounds a kept line; a longer one is marked as overflowing.
	maxLine int

	cur      []byte
	overflow bool // cur has lost bytes

	last         []byte
	lastOverflow bool

	tail *tailBuffer
}

func newLineWriter(stream string, sink jobtype.LineFunc, budget *outputBudget, maxLine, tailBytes int) *lineWriter {
	tail := &tailBuffer{keep: tailBytes}
	if tailBytes > 0 {
		// Raw bytes beyond what is kept, so that a secret across the tail's start is still
		// whole when the tail is redacted.
		tail.max = tailBytes + cutSlack
	}
	return &lineWriter{stream: stream, sink: sink, budget: budget, maxLine: maxLine, tail: tail}
}

// cutSlack is how many raw bytes past a shown bound are kept so that a secret across the bound
// is redacted whole before the cut. A longer secret across it is not found whole; what is left
// of it at the cut is dropped instead (secrets.Redactor.RedactCut).
const cutSlack = 4 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return n, nil
	}
	// The tail takes what comes before an end line only (it is where error messages are read).
	if i := bytes.Index(p, []byte(runtimes.EndMarker)); i >= 0 {
		w.tail.Write(p[:i])
	} else {
		w.tail.Write(p)
	}
	for len(p) > 0 && !w.ended {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := w.maxLine - len(w.cur); room < len(chunk) {
			w.cur = append(w.cur, chunk[:max(room, 0)]...)
			w.overflow = true
		} else {
			w.cur = append(w.cur, chunk...)
		}
		if i < 0 {
			break
		}
		w.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// Close delivers a last line that had no newline; what is written after it is dropped.
func (w *lineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended && (len(w.cur) > 0 || w.overflow) {
		w.endLine()
	}
	w.ended = true
	return nil
}

func (w *lineWriter) endLine() {
	line := bytes.TrimRight(w.cur, "\r")
	if before, code, ok := runtimes.ParseEnd(line); ok && !w.overflow {
		// The runtime's end line is not the job's output, and nothing after it is; what came
		// before it on the line is the job's last output, printed without a newline.
		if len(before) > 0 {
			w.cur = before
			w.endLine()
		}
		w.ended = true
		w.cur = w.cur[:0]
		if w.end != nil {
			w.end.saw(code)
		}
		return
	}
	if before, ok := runtimes.ParseReady(line); ok && !w.overflow {
		// A warm jail's ready line, read after its job was handed over: the host's, not the job's.
		if len(before) > 0 {
			w.cur = before
			w.endLine()
		}
		w.cur = w.cur[:0]
		return
	}
	if len(bytes.TrimSpace(line)) > 0 || w.overflow {
		w.last = append(w.last[:0], line...)
		w.lastOverflow = w.overflow
	}
	if w.sink != nil {
		shown := w.redact.line(line, w.overflow)
		if len(shown) > maxLogLine {
			at := maxLogLine
			// Cut before a "[REDACTED]" rather than through it: its start alone would read as
			// the job's own text.
			if i := bytes.LastIndex(shown[:min(at+len(secrets.Redacted), len(shown))], []byte(secrets.Redacted)); i >= 0 && i < at && at < i+len(secrets.Redacted) {
				at = i
			}
			shown = append(shown[:at:at], fmt.Sprintf(" …[%d bytes cut from this log line]", len(shown)-at)...)
		}
		if w.budget.take(len(shown) + 1) {
			w.sink(w.stream, shown)
		}
	}
	w.cur = w.cur[:0]
	w.overflow = false
}

// maxLogLine bounds a single published log line; the full line still counts as a result.
const maxLogLine = 16 << 10

// stderrTail is how much of the end of a run's stderr its error event and record keep.
const stderrTail = 4 << 10

// stderrLine bounds a kept stderr line: what is shown of it and the slack that lets a secret
// across the cut be redacted whole.
const stderrLine = maxLogLine + cutSlack

// outputBudget counts the log bytes a job may publish, shared by stdout and stderr.
type outputBudget struct {
	mu   sync.Mutex
	max  int64
	left int64
	// taken is what was published before the cap was reached; the truncation line names it.
	taken   int64
	dropped int64
}

func newOutputBudget(max int64) *outputBudget { return &outputBudget{max: max, left: max} }

func (b *outputBudget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left >= int64(n) {
		b.left -= int64(n)
		b.taken += int64(n)
		return true
	}
	// Once one line did not fit, none does: a log that skipped a long line and went on with
	// short ones would look complete while it is not.
	b.left = 0
	b.dropped += int64(n)
	return false
}

// truncated reports the bytes published before the cap and those dropped after it, and the
// line that ends such a log; dropped is 0 and line nil when nothing was cut.
func (b *outputBudget) truncated() (published, dropped int64, line []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return b.taken, 0, nil
	}
	return b.taken, b.dropped, fmt.Appendf(nil, "[host] output truncated after %d bytes; %d more bytes were not logged (the per-job cap is the host's --max-output-bytes %d): print less, or write large output to a file in a volume",
		b.taken, b.dropped, b.max)
}

// tailBuffer keeps the last max bytes written to it, to show the last keep of them.
type tailBuffer struct {
	max, keep int
	buf       []byte
	cut       bool // bytes fell off the front
}

func (t *tailBuffer) Write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) >= t.max {
		t.cut = t.cut || len(p) > t.max || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.cut = true
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

// String is the tail as it was written.
func (t *tailBuffer) String() string { return t.shown(t.buf) }

// redacted is the tail with the job's secrets hidden: redacted first, then cut to its size, so
// the cut never splits a secret; a part of one left at the front, where older output fell
// off, is dropped.
func (t *tailBuffer) redacted(r redactor) string {
	b := t.buf
	if t.cut {
		b = r.cutStart(b)
	} else {
		b = r.line(b, false)
	}
	return t.shown(b)
}

func (t *tailBuffer) shown(b []byte) string {
	if over := len(b) - t.keep; over > 0 {
		start := over
		// A cut through a "[REDACTED]" would leave its end as if it were text of the job's.
		if i := bytes.LastIndex(b[:min(start+len(secrets.Redacted), len(b))], []byte(secrets.Redacted)); i >= 0 && i < start && start < i+len(secrets.Redacted) {
			start = i + len(secrets.Redacted)
		}
		for start < len(b) && !utf8.RuneStart(b[start]) {
			start++
		}
		b = b[start:]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// endWatch hears the end line on stdout and on stderr and then tells the exit code it announced
// to the run (sandbox.Handle.End): only with both is everything the job printed read.
type endWatch struct {
	mu   sync.Mutex
	seen int
	code int
	to   func(code int) // see bind
}

func (e *endWatch) saw(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen++
	switch e.seen {
	case 1:
		e.code = code
	case 2:
		if e.to != nil {
			e.to(e.code)
		}
	}
}

// bind tells to the code once both end lines are in: now, if they came before the run was
// started. A nil watch does nothing: the run is not ended early.
func (e *endWatch) bind(to func(code int)) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.to = to
	if e.seen >= 2 {
		to(e.code)
	}
}

package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/trace"
)

// jobView is a job's page.
type jobView struct {
	session // who the page is shown to
	*jobs.Record
	Result    string       // indented JSON
	Arguments string       // as the record kept them, or the trigger's body while it is kept
	CanRerun  bool         // the record kept its arguments: a Re-run runs them again
	NotKept   string       // why not, when it cannot
	Staged    []StagedView // the diff of each volume a waiting staged step changed
	Run       time.Duration
	// DecisionWait is how long a step waited, or has waited, for a decision after its run.
	DecisionWait time.Duration
	// TickFrom and WaitFrom are when the run, and the wait for a decision, started while
	// they last: job.js counts their times up in the page (RFC 3339, "" once they ended).
	TickFrom, WaitFrom string
	TraceURL           string // the job's trace (serve --trace-url), "" when none
}

func (d *Dashboard) jobPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	rec, err := c.Jobs.Get(ctx, r.PathValue("id"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	now := time.Now()
	v := &jobView{Record: rec, Run: rec.RunTime(), DecisionWait: rec.DecisionWait(now),
		TraceURL: trace.URL(d.cfg.TraceURL, rec.Trace)}
	switch {
	case rec.Status == jobtype.Running && !rec.Started.IsZero():
		v.TickFrom = rec.Started.UTC().Format(time.RFC3339Nano)
	case rec.Status == jobtype.Waiting && !rec.RunEnded.IsZero():
		v.WaitFrom = rec.RunEnded.UTC().Format(time.RFC3339Nano)
	}
	if len(rec.Result) > 0 {
		v.Result = indent(rec.Result)
	}
	v.Staged = Staged(ctx, d.cfg.Volumes, rec)
	// The record keeps the arguments as sent ($secret: references, never values), so they are
	// shown as they are. A record without them (written before records kept them, or over
	// jobs.MaxArgsBytes) may still have them in the trigger stream while the job waits or
	// runs, and in its dead letter once it failed for good.
	switch {
	case rec.Args != nil:
		v.Arguments, v.CanRerun = indent(rec.Args), true
	case !rec.Status.Final():
		if data, err := c.Trigger(ctx, rec.ID); err == nil {
			v.Arguments = indent(data)
		}
	case rec.Status == jobtype.Failed:
		if dl, err := c.DeadLetter(ctx, rec.ID); err == nil {
			v.Arguments = indent(dl.Data)
		}
	}
	if rec.Args == nil && rec.ArgsBytes == 0 && rec.ArgsSHA256 == jobs.ArgsHash(nil) {
		v.CanRerun = true // an empty body, run again as {}
	}
	if !v.CanRerun {
		v.NotKept = argsNotKept(rec)
	}
	d.render(w, r, "job", v)
}

func indent(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// logEvent is one line of a job's log as the page's EventSource gets it.
type logEvent struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// jobLog streams a job's log as Server-Sent Events, from its first line, and ends with an
// "end" event carrying the job's final status once it has ended and every line was sent.
// Each line is a message of its own, or with ?batch=1 the lines come in "lines" events, each
// an array of them.
func (d *Dashboard) jobLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c, err := d.client(r.Context())
	if err != nil {
		d.fail(w, r, err)
		return
	}
	rec, err := c.Jobs.Get(r.Context(), id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	// A ResponseController finds the Flush of a writer that middleware (the host's auth) wrapped.
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		d.log.Warn("dashboard: cannot stream a job's log on this connection", zap.String("job", id), zap.Error(err))
		return
	}

	ctx := r.Context()
	lines := make(chan client.LogLine, 256)
	type end struct {
		rec *jobs.Record
		err error
	}
	done := make(chan end, 1)
	go func() {
		final, err := c.FollowJob(ctx, rec.Function, id, func(l client.LogLine) {
			select {
			case lines <- l:
			case <-ctx.Done():
			}
		})
		done <- end{final, err}
	}()
	send := func(event string, v any) {
		b, _ := json.Marshal(v)
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	// With ?batch=1 the lines waiting at each flush go as one "lines" event holding their
	// array: the log viewer's way, as a browser dispatching 50,000 events one by one spends
	// seconds on them. Without it, one message a line, as before.
	batched := r.URL.Query().Get("batch") == "1"
	var batch []logEvent
	put := func(l client.LogLine) {
		if !batched {
			send("", logEvent{Stream: l.Stream, Text: l.Text})
			return
		}
		batch = append(batch, logEvent{Stream: l.Stream, Text: l.Text})
		if len(batch) == maxLogBatch {
			flushBatch(send, &batch)
		}
	}
	for {
		select {
		case l := <-lines:
			put(l)
			// Send what else is waiting before flushing, so a long log is not one write a line.
			for more := true; more; {
				select {
				case l := <-lines:
					put(l)
				default:
					more = false
				}
			}
			flushBatch(send, &batch)
			rc.Flush()
		case e := <-done:
			// FollowJob returns once fn had every line; whatever it queued is in lines.
			for len(lines) > 0 {
				put(<-lines)
			}
			flushBatch(send, &batch)
			if e.err != nil {
				send("end", map[string]string{"error": e.err.Error()})
			} else {
				send("end", map[string]string{"status": string(e.rec.Status)})
			}
			rc.Flush()
			return
		}
	}
}

// maxLogBatch bounds the lines of one "lines" event, so that one event stays a bounded size.
const maxLogBatch = 2000

func flushBatch(send func(string, any), batch *[]logEvent) {
	if len(*batch) > 0 {
		send("lines", *batch)
		*batch = (*batch)[:0]
	}
}

// cancelJob cancels a job as `host cancel` does, and records who asked for it.
func (d *Dashboard) cancelJob(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !d.mayRunEach(w, r, func() ([]string, error) { return jobFunction(ctx, c, id) }) {
		return
	}
	got, err := c.CancelAs(ctx, id, actor(r))
	d.audit(ctx, c, r, "job.cancel", id, "", err)
	if err != nil {
		d.log.Info("dashboard: cancel refused", zap.String("job", id), zap.String("by", who(r)), zap.Error(err))
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: job canceled", zap.String("job", id), zap.String("function", got.Function),
		zap.String("was", string(got.Was)), zap.String("by", who(r)))
	http.Redirect(w, r, "/jobs/"+id, http.StatusSeeOther)
}

func (d *Dashboard) decideJob(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	if rec, ok := d.decide(ctx, c, w, r); ok {
		http.Redirect(w, r, "/jobs/"+rec.ID, http.StatusSeeOther)
	}
}

// jobLogText serves the whole log of a job as it stands, as text to save: one line per log
// line, stdout and stderr interleaved as they were published.
func (d *Dashboard) jobLogText(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := c.Jobs.Get(ctx, id); err != nil {
		d.fail(w, r, err)
		return
	}
	lines, err := c.Logs(ctx, id)
	if err != nil {
		d.fail(w, r, fmt.Errorf("read the log of job %s: %w", id, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": id + ".log"}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, l := range lines {
		bw.WriteString(l.Text)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		d.log.Info("dashboard: log download cut short", zap.String("job", id), zap.Error(err))
	}
}

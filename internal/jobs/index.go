package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
)

// The index of the records is in their own headers. Every record is written with the fields a
// listing filters and sorts on as headers of its KeyValue entry, so a listing reads the bucket
// with a headers-only consumer (a few hundred bytes a record, no JSON decoded) and fetches the
// bodies of only the records it prints. The key stays the job id, so `host job <id>` is one get.
const (
	hdrFunction = "Job-Function"
	hdrAttempts = "Job-Attempts"
	hdrEnqueued = "Job-Enqueued" // unix nanoseconds
	hdrStarted  = "Job-Started"
	hdrFinished = "Job-Finished"
	// hdrScheduled is the tick of a scheduled run (unix nanoseconds), so a listing can fold the
	// runs of a schedule without reading their bodies.
	hdrScheduled = "Job-Scheduled"
	// hdrRunEnded is when the run of a step that waits for a decision ended (Record.RunEnded),
	// so a listing's run time leaves the wait for a person out.
	hdrRunEnded = "Job-Run-Ended"
)

// ErrEncode is returned for a record that cannot be encoded (its result is not valid JSON):
// writing it again cannot help.
var ErrEncode = errors.New("the record cannot be encoded")

// Summary is what the index says about one job: enough to filter, sort and count it.
type Summary struct {
	ID       string
	Function string
	FlowID   string
	Status   jobtype.Status
	Attempts int
	Enqueued time.Time
	Started  time.Time
	Finished time.Time
	RunEnded time.Time // Record.RunEnded
	// Scheduled is true for a run its function's schedule started.
	Scheduled bool
}

// When is the time a listing sorts a job by: its start, or its enqueueing while it waits.
func (s *Summary) When() time.Time {
	if s.Started.IsZero() {
		return s.Enqueued
	}
	return s.Started
}

// Run is how long the job's last attempt ran, or has run by now: until its run ended, for a
// step that then waited for a decision; 0 before it started.
func (s *Summary) Run(now time.Time) time.Duration {
	switch {
	case s.Started.IsZero():
		return 0
	case !s.RunEnded.IsZero():
		return s.RunEnded.Sub(s.Started)
	case !s.Finished.IsZero():
		return s.Finished.Sub(s.Started)
	}
	return now.Sub(s.Started)
}

// When is the time a listing sorts a job by: its start, or its enqueueing while it waits.
func (r *Record) When() time.Time { return r.summary().When() }

func (r *Record) summary() *Summary {
	return &Summary{ID: r.ID, Function: r.Function, FlowID: r.FlowID, Status: r.Status, Attempts: r.Attempts,
		Enqueued: r.Enqueued, Started: r.Started, Finished: r.Finished, RunEnded: r.RunEnded, Scheduled: !r.Scheduled.IsZero()}
}

// Filter selects jobs; an empty (zero) field selects every value.
type Filter struct {
	Function string
	Flow     string
	Status   jobtype.Status
	// FunctionLike and IDLike select the jobs whose function or id holds them, ignoring case:
	// "tick" finds tick-every-15s.
	FunctionLike string
	IDLike       string
	// From and To bound When: From <= When < To.
	From time.Time
	To   time.Time
}

func (f Filter) keeps(s *Summary) bool {
	return (f.Function == "" || s.Function == f.Function) && (f.Flow == "" || s.FlowID == f.Flow) &&
		(f.Status == "" || s.Status == f.Status) &&
		(f.FunctionLike == "" || containsFold(s.Function, f.FunctionLike)) && (f.IDLike == "" || containsFold(s.ID, f.IDLike)) &&
		(f.From.IsZero() || !s.When().Before(f.From)) && (f.To.IsZero() || s.When().Before(f.To))
}

// containsFold reports whether sub is in s, ignoring case; it allocates only when either is not
// plain ASCII, as a listing calls it for every record.
func containsFold(s, sub string) bool {
	n := len(sub)
	for i := 0; i+n <= len(s); i++ {
		if asciiEqualFold(s[i:i+n], sub) {
			return true
		}
	}
	if isASCII(s) && isASCII(sub) {
		return false
	}
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func asciiEqualFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func subject(id string) string { return "$KV." + Bucket + "." + id }

// msg is the KeyValue entry of a record: its JSON under its id, with its index headers.
func (r *Record) msg() (*nats.Msg, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w: %w", r.ID, ErrEncode, err)
	}
	m := nats.NewMsg(subject(r.ID))
	m.Data = b
	m.Header.Set(bus.HeaderJobStatus, string(r.Status))
	m.Header.Set(hdrFunction, r.Function)
	m.Header.Set(bus.HeaderFlowID, r.FlowID)
	m.Header.Set(hdrAttempts, strconv.Itoa(r.Attempts))
	for h, t := range map[string]time.Time{hdrEnqueued: r.Enqueued, hdrStarted: r.Started, hdrFinished: r.Finished, hdrScheduled: r.Scheduled, hdrRunEnded: r.RunEnded} {
		if !t.IsZero() {
			m.Header.Set(h, strconv.FormatInt(t.UnixNano(), 10))
		}
	}
	return m, nil
}

// readSummary reads the index headers of an entry; ok is false for a record written without
// them (by an older host), whose body must be read instead.
func readSummary(id string, h nats.Header) (s Summary, ok bool) {
	if h.Get(hdrFunction) == "" {
		return s, false
	}
	at := func(k string) time.Time {
		n, err := strconv.ParseInt(h.Get(k), 10, 64)
		if err != nil {
			return time.Time{}
		}
		return time.Unix(0, n)
	}
	attempts, _ := strconv.Atoi(h.Get(hdrAttempts))
	return Summary{ID: id, Function: h.Get(hdrFunction), FlowID: h.Get(bus.HeaderFlowID), Status: jobtype.Status(h.Get(bus.HeaderJobStatus)),
		Attempts: attempts, Enqueued: at(hdrEnqueued), Started: at(hdrStarted), Finished: at(hdrFinished), RunEnded: at(hdrRunEnded), Scheduled: h.Get(hdrScheduled) != ""}, true
}

// Summaries reads the index of every record that f selects, in no particular order.
func (s *Store) Summaries(ctx context.Context, f Filter) ([]Summary, error) {
	cons, err := s.js.OrderedConsumer(ctx, "KV_"+Bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject(">")},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
		// Ordered consumers outlive their reader by the server's inactivity threshold; a
		// dashboard polling the listing would pile them up to the account's consumer limit.
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer func() {
		// Gone at once, not at the threshold: each listing is one consumer for its own length.
		del, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.js.DeleteConsumer(del, "KV_"+Bucket, info.Name)
	}()
	var out []Summary
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 2048)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			id := m.Subject()[len(subject("")):]
			if m.Headers().Get("KV-Operation") != "" {
				continue // a deleted or purged record
			}
			sum, ok := readSummary(id, nats.Header(m.Headers()))
			if !ok {
				r, err := s.Get(ctx, id)
				if err != nil {
					continue // gone meanwhile, or a record this version cannot read
				}
				sum = *r.summary()
			}
			if f.keeps(&sum) {
				out = append(out, sum)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		if got == 0 {
			break // the rest expired while we read
		}
		left -= uint64(got)
	}
	return out, nil
}

// oneByOne is how many records Recent reads by their keys at most.
const oneByOne = 1000

// Recent returns the records that f selects, newest first, at most limit of them (0: all). It
// reads the index, then the bodies of only the records it returns.
func (s *Store) Recent(ctx context.Context, f Filter, limit int) ([]*Record, error) {
	sums, err := s.Summaries(ctx, f)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(sums, func(a, b Summary) int { return cmp.Or(b.When().Compare(a.When()), cmp.Compare(a.ID, b.ID)) })
	if limit > 0 && len(sums) > limit {
		sums = sums[:limit]
	}
	if len(sums) > oneByOne {
		// Reading the bodies one by one costs a round trip each; past this many, one pass over
		// every record is quicker.
		recs, err := s.List(ctx, func(r *Record) bool { return f.keeps(r.summary()) })
		if err != nil {
			return nil, err
		}
		return recs[:min(len(recs), len(sums))], nil
	}
	out := make([]*Record, 0, len(sums))
	for _, sum := range sums {
		r, err := s.Get(ctx, sum.ID)
		if errors.Is(err, ErrNotFound) {
			continue // expired since the index was read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

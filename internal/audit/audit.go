// Package audit is the record of who did what: every administrative act (a secret set or
// removed, a webhook or a user added or removed, a token issued, an approval decided, a job
// cancelled or replayed, a deployment, a volume restored) is appended to the AGENT_AUDIT
// stream by the face or the host that did it, and read back by `host audit` and the
// dashboard. Appending never blocks an act for long, and an act that could not be recorded
// says so in the host's log: the act happened, the record of it is what is missing.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The stream and its subjects: agent.audit.<act>, so that a consumer can follow one kind.
const (
	Stream = "AGENT_AUDIT"
	Prefix = "agent.audit."
	maxAge = 365 * 24 * time.Hour
	// maxMsgs bounds the stream by count, not bytes: a file stream with a byte limit reserves
	// it in the server's store up front, and a host on a small store must not be refused at
	// start for a record that grows by a few hundred bytes per administrative act. Half a
	// million acts is about 200 MB; `serve --store-limit AGENT_AUDIT=<size>` bounds the bytes.
	maxMsgs = 500_000
)

// Entry is one act.
type Entry struct {
	At time.Time `json:"at"`
	// Who did it: a user's name, or what the face knows of the operator ("admin (web token)",
	// "root@vm", as `host approve` records it).
	Who string `json:"who"`
	// Face is where it was done: web, cli, nats, link, host.
	Face string `json:"face"`
	// Act is what was done, e.g. "secret.set", "approval.approve" (the subject's last tokens).
	Act string `json:"act"`
	// Target is what it was done to: a secret's name, a job id, a user's name.
	Target string `json:"target,omitempty"`
	// Detail is anything else worth keeping; never a secret's value.
	Detail string `json:"detail,omitempty"`
	// Error is set when the act was refused; refusals are kept too, they are who tried what.
	Error string `json:"error,omitempty"`
	// Host names the host that recorded it, when one did.
	Host string `json:"host,omitempty"`
	Seq  uint64 `json:"seq,omitempty"`
}

// Ensure creates the audit stream, or keeps the one there.
func Ensure(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: Stream, Description: "who did what: administrative acts (host audit)",
		Subjects: []string{Prefix + ">"}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		MaxAge: maxAge, MaxMsgs: maxMsgs, MaxBytes: -1, Discard: jetstream.DiscardOld, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("create the audit stream %s: %w", Stream, err)
	}
	return nil
}

// Append records e, stamping its time if unset.
func Append(ctx context.Context, js jetstream.JetStream, e Entry) error {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	if e.Act == "" || e.Who == "" {
		return errors.New("an audit entry names who and what")
	}
	b, _ := json.Marshal(e)
	subject := Prefix + subjectToken(e.Act)
	if _, err := js.Publish(ctx, subject, b); err != nil {
		return fmt.Errorf("append %s by %s to %s: %w", e.Act, e.Who, Stream, err)
	}
	return nil
}

// subjectToken keeps an act usable as subject tokens: dots stay, anything else odd is _.
func subjectToken(act string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.Trim(act, "."))
}

// Filter narrows Read.
type Filter struct {
	Since time.Time // entries at or after
	Who   string    // only this user's
	Limit int       // the newest Limit; 0 is 1000
}

// Read returns the entries f selects, oldest first.
func Read(ctx context.Context, js jetstream.JetStream, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil // nothing was ever recorded
	}
	if err != nil {
		return nil, fmt.Errorf("open the audit stream %s: %w", Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the audit stream %s: %w", Stream, err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !f.Since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &f.Since
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("read the audit stream %s: %w", Stream, err)
	}
	var out []Entry
	last := info.State.LastSeq
	for {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("read the audit stream %s: %w", Stream, err)
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			md, _ := m.Metadata()
			if md != nil {
				seq = md.Sequence.Stream
			}
			var e Entry
			if json.Unmarshal(m.Data(), &e) != nil {
				continue
			}
			e.Seq = seq
			if f.Who == "" || e.Who == f.Who {
				out = append(out, e)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read the audit stream %s: %w", Stream, err)
		}
		if n == 0 || seq >= last {
			break
		}
	}
	if len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

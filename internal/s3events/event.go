// Package s3events starts functions from S3 bucket notifications: an S3 server (versitygw,
// MinIO, AWS through a bridge) publishes each event, in the AWS S3 event format, to a NATS
// subject (s3.events by default); the trigger stream keeps it; one router, shared by every host
// that serves an `on: s3:<bucket>[/<prefix>]` function, reads it and queues one trigger per
// record and listening function on agent.run.<fn>, with a message id derived from the event, so
// a redelivered or repeated event runs nothing twice.
package s3events

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DefaultSubject is where S3 servers publish their notifications unless serve
// --s3-events-subject says otherwise.
const DefaultSubject = "s3.events"

// Args are what a function started by an object event is called with.
type Args struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
	// Event is the event's name as AWS spells it, without the "s3:" that versitygw and MinIO
	// put before it: "ObjectCreated:Put", "ObjectRemoved:Delete".
	Event string `json:"event"`
	// Time is the event's time as the S3 server wrote it (RFC 3339).
	Time string `json:"time,omitempty"`
	// VersionID is the object's version, when the bucket keeps versions.
	VersionID string `json:"version_id,omitempty"`
}

// Kind is what happened to the object.
type Kind int

// The kinds an on: s3: line may name; Other (tagging, ACL, restore) starts nothing.
const (
	Other Kind = iota
	Created
	Removed
)

// Record is one object event, with what identifies it across redeliveries.
type Record struct {
	Args
	Kind Kind
	// Sequencer orders the events of one key (AWS, MinIO; versitygw counts from 1 at its start).
	Sequencer string
}

// ID is what names the event for deduplication: the same record sent again (a server's retry,
// a router's redelivery) gives the same id; another event of the same key differs at least in
// its sequencer, time or etag.
func (r Record) ID() []string {
	return []string{r.Event, r.Bucket, r.Key, r.VersionID, r.ETag, r.Sequencer, r.Time}
}

// ErrTestEvent is the test event S3 servers send when a notification target is set up
// (versitygw at its start): nothing to run.
var ErrTestEvent = errors.New("an S3 test event (s3:TestEvent)")

// wire is the AWS S3 event format, as far as the router reads it.
type wire struct {
	Event   string `json:"Event"` // "s3:TestEvent" in a test event
	Records []struct {
		EventName string `json:"eventName"`
		EventTime string `json:"eventTime"`
		S3        struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key       string  `json:"key"`
				Size      int64   `json:"size"`
				ETag      *string `json:"eTag"`
				VersionID *string `json:"versionId"`
				Sequencer string  `json:"sequencer"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
}

// Parse reads a notification: its records, ErrTestEvent, or an error saying what is wrong.
func Parse(data []byte) ([]Record, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("not an S3 event (AWS S3 event format, JSON): %w", err)
	}
	if w.Event == "s3:TestEvent" {
		return nil, ErrTestEvent
	}
	if len(w.Records) == 0 {
		return nil, errors.New(`not an S3 event: no "Records"`)
	}
	out := make([]Record, 0, len(w.Records))
	for i, wr := range w.Records {
		o := wr.S3.Object
		if wr.S3.Bucket.Name == "" || o.Key == "" || wr.EventName == "" {
			return nil, fmt.Errorf("S3 event record %d has no s3.bucket.name, s3.object.key or eventName", i)
		}
		// AWS, MinIO and versitygw send the key URL-encoded (a space as "+").
		key, err := url.QueryUnescape(o.Key)
		if err != nil {
			key = o.Key
		}
		event := strings.TrimPrefix(wr.EventName, "s3:")
		r := Record{Args: Args{Bucket: wr.S3.Bucket.Name, Key: key, Size: o.Size, ETag: strings.Trim(deref(o.ETag), `"`),
			Event: event, Time: wr.EventTime, VersionID: deref(o.VersionID)}, Sequencer: o.Sequencer}
		switch {
		case strings.HasPrefix(event, "ObjectCreated:"):
			r.Kind = Created
		case strings.HasPrefix(event, "ObjectRemoved:"):
			r.Kind = Removed
		}
		out = append(out, r)
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

var statuses = []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Waiting, jobtype.Retrying, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled}

// Every pair of statuses, against a real bucket: the store makes exactly the moves the table
// allows and refuses every other, leaving the stored record as it was.
func TestMoveRefusesEveryIllegalPair(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	for _, from := range append([]jobtype.Status{jobtype.None}, statuses...) {
		for _, to := range statuses {
			id := "j-" + string(from) + "-" + string(to)
			var at jobs.Version
			if from != jobtype.None {
				hosttest.PutRecord(t, st, &jobs.Record{ID: id, Function: "f", Status: from})
				var err error
				if _, at, err = st.GetRev(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			_, err := st.Move(ctx, &jobs.Record{ID: id, Function: "f", Status: to, Error: "moved"}, at)
			legal := from.To(to) == nil
			if legal != (err == nil) {
				t.Errorf("%q → %q: store said %v, want legal = %v", from, to, err, legal)
				continue
			}
			got, err2 := st.Get(ctx, id)
			switch {
			case legal && (err2 != nil || got.Status != to):
				t.Errorf("%q → %q: stored %+v, %v", from, to, got, err2)
			case !legal && from == jobtype.None && !errors.Is(err2, jobs.ErrNotFound):
				t.Errorf("%q → %q refused, but a record was written: %+v", from, to, got)
			case !legal && from != jobtype.None && (err2 != nil || got.Status != from || got.Error == "moved"):
				t.Errorf("%q → %q refused, but the record changed: %+v, %v", from, to, got, err2)
			}
			if !legal && !errors.As(err, new(*jobtype.IllegalMoveError)) {
				t.Errorf("%q → %q: error %v is not an IllegalMoveError", from, to, err)
			}
		}
	}
}

// A writer that read the record running, and is slow, cannot overwrite what was written
// meanwhile when its move is illegal from there: a cancel stays a cancel. The refusal names
// what is stored.
func TestMoveIsCheckedAgainstTheStoredRecord(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	hosttest.PutRecord(t, st, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Running, Host: "slow-host"})
	_, hostSaw, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	rec, cancelSaw, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.Error = jobtype.Canceled, "canceled by the test"
	if _, err := st.Move(ctx, rec, cancelSaw); err != nil {
		t.Fatal(err)
	}
	for _, late := range []jobtype.Status{jobtype.Succeeded, jobtype.Failed, jobtype.Retrying, jobtype.Running} {
		_, err := st.Move(ctx, &jobs.Record{ID: "j", Function: "f", Status: late, Host: "slow-host"}, hostSaw)
		var moved *jobs.MoveError
		if !errors.As(err, &moved) || moved.Illegal == nil || moved.Stored == nil || moved.Stored.Status != jobtype.Canceled {
			t.Fatalf("a late %s over a cancel: %v (%+v), want a MoveError naming the canceled record", late, err, moved)
		}
		if !errors.Is(err, jobs.ErrConflict) {
			t.Errorf("a refused late %s is not ErrConflict: %v", late, err)
		}
	}
	if got, err := st.Get(ctx, "j"); err != nil || got.Status != jobtype.Canceled || got.Error != "canceled by the test" {
		t.Fatalf("record after the late writes: %+v, %v", got, err)
	}
}

// A write at a version the record has left, whose move is still legal from what is stored
// (the same attempt's record amended meanwhile), is not made either; the writer learns the
// version to decide again from. (Another attempt taking the job over fences this one: see
// TestMoveFencesAStaleAttempt.)
func TestMoveFromAStaleVersionIsAConflict(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	hosttest.PutRecord(t, st, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Running, Attempts: 1})
	rec, first, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	rec.LogLastSeq = 5
	second, err := st.Amend(ctx, rec, first)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Move(ctx, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Succeeded, Attempts: 1}, first)
	var moved *jobs.MoveError
	if !errors.As(err, &moved) || moved.Illegal != nil || moved.Stale != nil || moved.At != second || moved.Stored.LogLastSeq != 5 {
		t.Fatalf("write at a left version: %v (%+v), want a legal conflict at the amended version", err, moved)
	}
	if _, err := st.Move(ctx, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Succeeded, Attempts: 1}, moved.At); err != nil {
		t.Fatalf("move from the version the conflict named: %v", err)
	}
}

// Creating is moving from no record: refused over a record (a repeated id), allowed again once
// the record is deleted (its marker is no record), and deleting is checked by version too.
func TestCreateAndDeleteAreChecked(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	queued := &jobs.Record{ID: "j1", Function: "f", Status: jobtype.Queued, Enqueued: time.Now()}
	v, err := st.Move(ctx, queued, jobs.Version{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Move(ctx, queued, jobs.Version{}); !errors.Is(err, jobs.ErrConflict) {
		t.Fatalf("create over a record: %v, want ErrConflict", err)
	}
	running := *queued
	running.Status, running.Started = jobtype.Running, time.Now()
	v2, err := st.Move(ctx, &running, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "j1", v); !errors.Is(err, jobs.ErrConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrConflict", err)
	}
	sums, err := st.Summaries(ctx, jobs.Filter{Status: jobtype.Running})
	if err != nil || len(sums) != 1 || sums[0].ID != "j1" || sums[0].Function != "f" || sums[0].Started.IsZero() {
		t.Fatalf("summaries %+v, %v", sums, err)
	}
	if err := st.Delete(ctx, "j1", v2); err != nil {
		t.Fatal(err)
	}
	if sums, err := st.Summaries(ctx, jobs.Filter{}); err != nil || len(sums) != 0 {
		t.Fatalf("summaries after delete %+v, %v", sums, err)
	}
	if _, err := st.Move(ctx, queued, jobs.Version{}); err != nil {
		t.Fatalf("create over a deleted record: %v", err)
	}
}

// An amendment (a replay noted on a failed job) keeps the status it read, and is checked by
// version like any write.
func TestAmendKeepsTheStatus(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	hosttest.PutRecord(t, st, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Failed})
	rec, at, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	rec.ReplayedAs = []string{"j2"}
	if _, err := st.Amend(ctx, rec, at); err != nil {
		t.Fatal(err)
	}
	rec.ReplayedAs = []string{"j3"}
	if _, err := st.Amend(ctx, rec, at); !errors.Is(err, jobs.ErrConflict) {
		t.Fatalf("amend at a stale version: %v, want ErrConflict", err)
	}
	rec.Status = jobtype.Succeeded
	if _, err := st.Amend(ctx, rec, at); err == nil {
		t.Fatal("an amendment changed the status")
	}
	if got, err := st.Get(ctx, "j"); err != nil || got.Status != jobtype.Failed || len(got.ReplayedAs) != 1 || got.ReplayedAs[0] != "j2" {
		t.Fatalf("record %+v, %v", got, err)
	}
}

// The store fences attempts: a write by an older attempt than the one the record names is
// refused, whatever the statuses, from the version it read (a conflict, read back) and from the
// record as it is; the record keeps the later attempt's. The later attempt, and writers that
// copy the attempt they read (a cancel), pass.
func TestMoveFencesAStaleAttempt(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	hosttest.PutRecord(t, st, &jobs.Record{ID: "j", Function: "f", Status: jobtype.Running, Attempts: 1, Host: "cut-off"})
	_, olderSaw, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	later, at, err := st.GetRev(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	later.Attempts, later.Host = 2, "elsewhere"
	if at, err = st.Move(ctx, later, at); err != nil {
		t.Fatal(err)
	}
	later.Status = jobtype.Retrying
	if at, err = st.Move(ctx, later, at); err != nil {
		t.Fatal(err)
	}
	late := &jobs.Record{ID: "j", Function: "f", Status: jobtype.Succeeded, Attempts: 1, Host: "cut-off", Result: []byte(`"late"`)}
	_, err = st.Move(ctx, late, olderSaw)
	var moved *jobs.MoveError
	var stale *jobs.StaleAttemptError
	if !errors.As(err, &moved) || moved.Stale == nil || moved.Stored == nil || moved.Stored.Attempts != 2 ||
		!errors.As(err, &stale) || stale.Attempt != 1 || stale.Current != 2 || !errors.Is(err, jobs.ErrConflict) {
		t.Fatalf("a stale attempt's late success over a read version: %v (%+v)", err, moved)
	}
	late.Status = jobtype.Running // legal from retrying, but not by an older attempt
	if _, err := st.Move(ctx, late, at); !errors.As(err, &stale) {
		t.Fatalf("a stale attempt's move from the record as it is: %v", err)
	}
	if got, err := st.Get(ctx, "j"); err != nil || got.Status != jobtype.Retrying || got.Attempts != 2 || got.Result != nil {
		t.Fatalf("record after the stale writes: %+v, %v", got, err)
	}
	canceled := *later
	canceled.Status = jobtype.Canceled
	if _, err := st.Move(ctx, &canceled, at); err != nil {
		t.Fatalf("a cancel copying the attempt it read: %v", err)
	}
}

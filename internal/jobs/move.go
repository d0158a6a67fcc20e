package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobtype"
)

// Every write of a record is a move of its job's status, and the store refuses an illegal one
// against what it holds (River's JobSetStateIfRunning): a move names the Version it moves
// from, which only the store makes, from what it read or wrote, so the status a move is checked
// from is the stored one, never what a writer believes. A write at a Version the record has
// since left is not made; the store reads what won and says whether the move is still legal
// from there (see MoveError), so that a cancel written while a job ran is never overwritten by
// its host's late succeeded.
//
// The store fences attempts too (as Temporal rejects a stale attempt's completion): a record
// names the attempt that wrote it (Record.Attempts), and a write by an older attempt than the
// record's is refused (StaleAttemptError), whatever the statuses. A host cut off past the ack
// wait may finish its run after JetStream gave the message to another host; that later
// attempt owns the job from its claim, and the older one's late end, success or failure, is not
// the job's. Writers that are no attempt (`host cancel`, an approval's decision, a minimal
// record) copy the attempt they read, and pass.

// Version is a record as the store last saw it: the revision a conditional write names and the
// status the record had at it. The zero Version is no record (jobtype.None).
type Version struct {
	rev     uint64
	status  jobtype.Status
	attempt int // the record's Attempts: the attempt that wrote it
}

func versionOf(rev uint64, r *Record) Version {
	return Version{rev: rev, status: r.Status, attempt: r.Attempts}
}

// StaleAttemptError is a write by an attempt of a job older than the one its record names: a
// later delivery of the job's message has claimed it. Current is the record as it is.
type StaleAttemptError struct {
	ID               string
	Attempt, Current int
}

func (e *StaleAttemptError) Error() string {
	return fmt.Sprintf("job %s: attempt %d is stale: attempt %d holds the job's record", e.ID, e.Attempt, e.Current)
}

// Status is the record's status at this version.
func (v Version) Status() jobtype.Status { return v.status }

// ErrConflict is in the chain of every write the store did not make because the record was not
// at the version the write named: someone else wrote it first.
var ErrConflict = errors.New("the job record was written by someone else meanwhile")

// MoveError is a move the store did not make because the record was not at the version the
// move named. Stored is the record as it is (nil when there is none, deleted meanwhile), At its
// version; Illegal says the move is refused from there too (a canceled job cannot become
// succeeded), Stale that the record was written by a later attempt, else the writer may decide
// again from At. errors.Is(err, ErrConflict) holds for all; errors.As(err,
// **jobtype.IllegalMoveError) for an illegal one, errors.As(err, **StaleAttemptError) for a
// stale one.
type MoveError struct {
	Stored  *Record
	At      Version
	Illegal *jobtype.IllegalMoveError
	Stale   *StaleAttemptError
}

func (e *MoveError) Error() string {
	if e.Stale != nil {
		return fmt.Sprintf("%v (written meanwhile)", e.Stale)
	}
	if e.Illegal != nil {
		return fmt.Sprintf("%v (written meanwhile by another writer)", e.Illegal)
	}
	return ErrConflict.Error()
}

func (e *MoveError) Is(target error) bool { return target == ErrConflict }

func (e *MoveError) Unwrap() error {
	if e.Stale != nil {
		return e.Stale
	}
	if e.Illegal != nil {
		return e.Illegal
	}
	return nil
}

// Move writes r over the record at from: r.Status is where the job goes, and from's status must
// be allowed to go there (jobtype.Status.To), else an *jobtype.IllegalMoveError and nothing is
// written; r.Attempts must not be older than from's, else a *StaleAttemptError. When the record
// is no longer at from, the write is not made and a *MoveError says what is stored. Moving from
// the zero Version creates the record. It returns the record's new version.
func (s *Store) Move(ctx context.Context, r *Record, from Version) (Version, error) {
	if err := stale(r, from); err != nil {
		return from, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	if err := from.status.To(r.Status); err != nil {
		var ill *jobtype.IllegalMoveError
		if errors.As(err, &ill) {
			ill.ID = r.ID
		}
		return from, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	rev, err := s.publish(ctx, r, from.rev)
	if err == nil {
		return versionOf(rev, r), nil
	}
	if !errors.Is(err, ErrConflict) {
		return from, err
	}
	if from.rev == 0 {
		// A record that was deleted leaves a marker, which is no record: create over it.
		last, gerr := s.stream.GetLastMsgForSubject(ctx, subject(r.ID))
		if gerr == nil && last.Header.Get("KV-Operation") != "" {
			if rev, err = s.publish(ctx, r, last.Sequence); err == nil {
				return versionOf(rev, r), nil
			}
		}
	}
	return from, s.refusal(ctx, r, err)
}

// Amend writes r over the record at at without moving its status (a replay noted on a failed
// job): r.Status must be the stored one. A stale attempt is refused, and a record written
// meanwhile is a *MoveError, as for Move.
func (s *Store) Amend(ctx context.Context, r *Record, at Version) (Version, error) {
	if at.rev == 0 || r.Status != at.status {
		return at, fmt.Errorf("store job %s: an amendment keeps the status it read (%q), and this one says %q: this is a bug", r.ID, at.status, r.Status)
	}
	if err := stale(r, at); err != nil {
		return at, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	rev, err := s.publish(ctx, r, at.rev)
	if err == nil {
		return versionOf(rev, r), nil
	}
	if !errors.Is(err, ErrConflict) {
		return at, err
	}
	stored, now, gerr := s.GetRev(ctx, r.ID)
	if gerr != nil {
		return at, fmt.Errorf("%w; reading what was written meanwhile: %w", err, gerr)
	}
	e := &MoveError{Stored: stored, At: now}
	if err := stale(r, now); err != nil {
		e.Stale = err
	}
	return at, e
}

// stale refuses a write of r over a record at v that a later attempt wrote.
func stale(r *Record, v Version) *StaleAttemptError {
	if r.Attempts < v.attempt {
		return &StaleAttemptError{ID: r.ID, Attempt: r.Attempts, Current: v.attempt}
	}
	return nil
}

// refusal reads what won a race for r's record and says whether r's move is legal from there.
func (s *Store) refusal(ctx context.Context, r *Record, conflict error) error {
	stored, at, err := s.GetRev(ctx, r.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return &MoveError{}
	case err != nil:
		return fmt.Errorf("%w; reading what was written meanwhile: %w", conflict, err)
	}
	e := &MoveError{Stored: stored, At: at, Stale: stale(r, at)}
	if err := at.status.To(r.Status); err != nil {
		e.Illegal = &jobtype.IllegalMoveError{ID: r.ID, From: at.status, To: r.Status}
	}
	return e
}

// CreateAsync is Move from no record without waiting for the store's answer: the future's ack
// says the revision (see Created), its error ErrConflict (as an API error; see IsConflict) when
// the job had a record.
func (s *Store) CreateAsync(r *Record) (jetstream.PubAckFuture, error) {
	if err := jobtype.None.To(r.Status); err != nil {
		return nil, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	m, err := r.msg()
	if err != nil {
		return nil, err
	}
	f, err := s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		return nil, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	return f, nil
}

// Created is the version a CreateAsync of r wrote, from its acknowledgement.
func Created(r *Record, ack *jetstream.PubAck) Version {
	return versionOf(ack.Sequence, r)
}

// IsConflict reports whether err is the store's answer to a write that found another record
// than it expected.
func IsConflict(err error) bool {
	if errors.Is(err, ErrConflict) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (s *Store) publish(ctx context.Context, r *Record, rev uint64) (uint64, error) {
	m, err := r.msg()
	if err != nil {
		return 0, err
	}
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		if IsConflict(err) {
			return 0, fmt.Errorf("store job %s: %w", r.ID, ErrConflict)
		}
		return 0, fmt.Errorf("store job %s: %w", r.ID, err)
	}
	return ack.Sequence, nil
}

// Delete removes a record if it is still at v; ErrConflict when someone wrote it meanwhile.
func (s *Store) Delete(ctx context.Context, id string, v Version) error {
	if err := s.kv.Delete(ctx, id, jetstream.LastRevision(v.rev)); err != nil {
		if IsConflict(err) {
			return fmt.Errorf("delete job %s: %w", id, ErrConflict)
		}
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// GetRev reads one record and the version a Move of it names.
func (s *Store) GetRev(ctx context.Context, id string) (*Record, Version, error) {
	e, err := s.get(ctx, id)
	if err != nil {
		return nil, Version{}, err
	}
	r, err := decode(e)
	if err != nil {
		return nil, Version{}, err
	}
	return r, versionOf(e.Revision(), r), nil
}

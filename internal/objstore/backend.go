package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/retry"
)

// ErrNotFound is wrapped by errors about an object, a volume or a version that does not exist.
var ErrNotFound = errors.New("not found")

// ErrLimit is wrapped by the error of a commit that would exceed MaxBytes or MaxFiles.
var ErrLimit = errors.New("volume limit exceeded")

// ErrCheckout is wrapped by the error of a mount or a commit that found the job's directory
// unfit: a link on the volume's path, or something else where the volume goes. It is the
// job's doing (or its jail's), so retrying cannot help.
var ErrCheckout = errors.New("the job's directory is unfit for the volume")

// ErrCorrupt is wrapped by errors about content read from the store that is damaged or unsafe
// (a manifest that does not decode, names a path outside the volume, or does not hash to its
// name): retrying reads the same content again, so a job that meets it fails at once.
var ErrCorrupt = errors.New("the volume store holds corrupt or unsafe content, which retrying cannot fix: restore an earlier version (`host volumes restore`) or remove the volume")

// ErrLeaseLost is wrapped by the error of a commit whose run no longer holds the volume's lease.
var ErrLeaseLost = errors.New("volume lease lost")

// Backend stores immutable objects. Keys are slash-separated paths. Implementations need not
// retry: every call is retried with backoff by the caller.
type Backend interface {
	// Name says which store this is, for error messages: "jetstream:<bucket>" or
	// "s3:<endpoint>/<bucket>".
	Name() string
	// Put stores size bytes from r under key, replacing any object there.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens an object; the error wraps ErrNotFound when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat returns an object's size; the error wraps ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (size int64, err error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the keys that start with prefix.
	List(ctx context.Context, prefix string) ([]string, error)
}

// permanentError marks a backend error that retrying cannot fix (bad credentials, a missing
// bucket), so that a misconfiguration fails at once instead of after RetryFor.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// retryable reports whether err may go away if the call is tried again.
func retryable(err error) bool {
	var p permanentError
	switch {
	case errors.As(err, &p),
		errors.Is(err, ErrNotFound),
		errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, jetstream.ErrKeyExists),
		errors.Is(err, jetstream.ErrKeyNotFound),
		errors.Is(err, jetstream.ErrKeyDeleted),
		errors.Is(err, jetstream.ErrKeyRevisionMismatch),
		errors.Is(err, jetstream.ErrInvalidKey),
		errors.Is(err, jetstream.ErrBucketNotFound),
		localDiskFull(err):
		return false
	}
	return true
}

// localDiskFull reports an error of this host's own disk, which no retry of the store fixes.
func localDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}

// withRetries calls fn until it succeeds, fails for good, ctx ends or limit has passed. It returns
// how many attempts were made and the last error (not the context's, which says less).
func withRetries(ctx context.Context, limit time.Duration, fn func() error) (int, error) {
	attempts := 0
	var last error
	_, err := retry.Do(ctx, retry.Store.Within(limit), func() (struct{}, error) {
		attempts++
		last = fn()
		if last == nil {
			return struct{}{}, nil
		}
		if !retryable(last) || ctx.Err() != nil {
			return struct{}{}, retry.Permanent(last)
		}
		return struct{}{}, last
	})
	if err != nil && last != nil {
		err = last
	}
	return attempts, err
}

// storeCall runs one backend operation with retries and turns a final failure into an error
// that says which store, which object, and what to check.
func (v *Volumes) storeCall(ctx context.Context, op, key string, fn func() error) error {
	start := time.Now()
	attempts, err := withRetries(ctx, v.opts.RetryFor, fn)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s %s in %s: %w", op, key, v.b.Name(), err)
	}
	if localDiskFull(err) {
		return fmt.Errorf("%s %s in %s: %w (this host's disk is full or read-only, not the store: free space under the host's --data directory)", op, key, v.b.Name(), err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s in %s: %w (stopped: %w)", op, key, v.b.Name(), err, ctx.Err())
	}
	return fmt.Errorf("%s %s in %s: %w (gave up after %d attempts in %s; check that the store is up and reachable from this host and that its credentials and bucket are right)",
		op, key, v.b.Name(), err, attempts, time.Since(start).Round(time.Millisecond))
}

// kvCall is storeCall for the NATS KeyValue buckets that hold heads and leases.
func (v *Volumes) kvCall(ctx context.Context, op, bucket, key string, fn func() error) error {
	start := time.Now()
	attempts, err := withRetries(ctx, v.opts.RetryFor, fn)
	if err == nil || !retryable(err) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s in NATS KeyValue bucket %s: %w (stopped: %w)", op, key, bucket, err, ctx.Err())
	}
	return fmt.Errorf("%s %s in NATS KeyValue bucket %s: %w (gave up after %d attempts in %s; check that NATS is reachable and has JetStream enabled)",
		op, key, bucket, err, attempts, time.Since(start).Round(time.Millisecond))
}

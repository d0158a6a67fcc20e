package objstore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Open connects the volume store the host and `host volumes` share: S3 when s3 is set, else
// the JetStream Object Store (DefaultJetStreamBucket, at o.Replicas), and opens its volumes
// (New).
func Open(ctx context.Context, js jetstream.JetStream, s3 *S3Config, o Options) (*Volumes, error) {
	var b Backend
	var err error
	if s3 != nil {
		b, err = NewS3Backend(ctx, *s3)
	} else {
		b, err = NewJetStreamBackend(ctx, js, DefaultJetStreamBucket, o.Replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	v, err := New(ctx, js, b, o)
	if err != nil {
		return nil, fmt.Errorf("volume store %s: %w", b.Name(), err)
	}
	return v, nil
}

// Store names the store the volumes are kept in (Backend.Name).
func (v *Volumes) Store() string { return v.b.Name() }

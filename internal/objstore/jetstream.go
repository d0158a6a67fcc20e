package objstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultJetStreamBucket is the Object Store bucket volumes live in by default.
const DefaultJetStreamBucket = "agent_volumes"

type jsBackend struct {
	bucket string
	obs    jetstream.ObjectStore
	stream jetstream.Stream
}

// NewJetStreamBackend stores objects in a JetStream Object Store bucket, created if missing
// ("" means DefaultJetStreamBucket).
func NewJetStreamBackend(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (Backend, error) {
	if bucket == "" {
		bucket = DefaultJetStreamBucket
	}
	if replicas <= 0 {
		replicas = 1
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      bucket,
			Description: "agent host volumes: content-addressed blobs and manifests",
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if err != nil {
			// Another host may have created it at the same moment.
			if again, err2 := js.ObjectStore(ctx, bucket); err2 == nil {
				obs, err = again, nil
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open JetStream Object Store bucket %s: %w (check that NATS is reachable and has JetStream enabled)", bucket, err)
	}
	// Deleting through the Object Store API leaves a tombstone per object forever; the stream
	// handle lets Delete purge the object's subjects instead (see Delete).
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("open the stream behind Object Store bucket %s: %w", bucket, err)
	}
	return &jsBackend{bucket: bucket, obs: obs, stream: stream}, nil
}

func (b *jsBackend) Name() string { return "jetstream:" + b.bucket }

func (b *jsBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	info, err := b.obs.Put(ctx, jetstream.ObjectMeta{Name: key}, r)
	if err != nil {
		return err
	}
	if int64(info.Size) != size {
		return fmt.Errorf("stored %d bytes, expected %d: the source changed while it was uploaded", info.Size, size)
	}
	return nil
}

func (b *jsBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	res, err := b.obs.Get(ctx, key)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (b *jsBackend) Stat(ctx context.Context, key string) (int64, error) {
	info, err := b.obs.GetInfo(ctx, key)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

// Delete purges the object's meta subject, then its chunks. ObjectStore.Delete would instead
// keep a "deleted" meta message per object forever, and garbage collection deletes many
// objects. The subject layout ($O.<bucket>.M.<base64url(name)>, $O.<bucket>.C.<nuid>) is the
// Object Store's published format (ADR-20). Purging the meta first makes the object vanish in
// one step; chunks left by a crash in between are unreachable and only cost space.
func (b *jsBackend) Delete(ctx context.Context, key string) error {
	info, err := b.obs.GetInfo(ctx, key, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	meta := fmt.Sprintf("$O.%s.M.%s", b.bucket, base64.URLEncoding.EncodeToString([]byte(key)))
	if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(meta)); err != nil {
		return err
	}
	if info.NUID == "" {
		return nil
	}
	return b.stream.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("$O.%s.C.%s", b.bucket, info.NUID)))
}

// List reads the meta of every object in the bucket: the Object Store encodes names into
// subjects in a way that cannot be filtered by prefix. Garbage collection therefore lists only
// after a failed commit or a removal, never on the ordinary commit path.
func (b *jsBackend) List(ctx context.Context, prefix string) ([]string, error) {
	infos, err := b.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, in := range infos {
		if !in.Deleted && strings.HasPrefix(in.Name, prefix) {
			keys = append(keys, in.Name)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

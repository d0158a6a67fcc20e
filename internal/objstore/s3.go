package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3Config says where an S3 store is. Endpoint is host[:port], or a URL whose scheme sets
// Secure; empty means AWS S3 itself.
type S3Config struct {
	Endpoint, Bucket, AccessKey, SecretKey, Region string
	Secure                                         bool
}

// S3ConfigFromEnv fills the empty fields of c from the usual AWS variables: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION (then AWS_DEFAULT_REGION), and AWS_ENDPOINT_URL_S3 (then
// AWS_ENDPOINT_URL: the service-specific variable wins, as in the AWS SDKs). An endpoint URL
// starting with https:// sets Secure; the scheme is stripped.
func S3ConfigFromEnv(c S3Config) S3Config {
	first := func(names ...string) string {
		for _, n := range names {
			if v := os.Getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	if c.AccessKey == "" {
		c.AccessKey = first("AWS_ACCESS_KEY_ID")
	}
	if c.SecretKey == "" {
		c.SecretKey = first("AWS_SECRET_ACCESS_KEY")
	}
	if c.Region == "" {
		c.Region = first("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	if c.Endpoint == "" {
		if ep := first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"); ep != "" {
			c.Endpoint, c.Secure = splitEndpoint(ep, c.Secure)
		}
	}
	return c
}

// splitEndpoint strips a URL scheme (and any path) from an endpoint; the scheme decides
// whether TLS is used, otherwise secure stays as given.
func splitEndpoint(ep string, secure bool) (string, bool) {
	switch {
	case strings.HasPrefix(ep, "https://"):
		ep, secure = strings.TrimPrefix(ep, "https://"), true
	case strings.HasPrefix(ep, "http://"):
		ep, secure = strings.TrimPrefix(ep, "http://"), false
	}
	if i := strings.IndexByte(ep, '/'); i >= 0 {
		ep = ep[:i]
	}
	return ep, secure
}

type s3Backend struct {
	c      *minio.Client
	bucket string
	name   string
}

// s3SetupTimeout bounds how long NewS3Backend keeps trying to reach the store when ctx has
// no deadline of its own.
const s3SetupTimeout = 30 * time.Second

// NewS3Backend stores objects in an S3 bucket through minio-go, with path-style addressing
// (which MinIO, versitygw and SeaweedFS need and AWS accepts), and creates the bucket if it is
// missing.
func NewS3Backend(ctx context.Context, c S3Config) (Backend, error) {
	endpoint, secure := splitEndpoint(c.Endpoint, c.Secure)
	if endpoint == "" {
		endpoint, secure = "s3.amazonaws.com", true
	}
	if c.Bucket == "" {
		return nil, errors.New("S3 volume store: no bucket given; pass --s3-bucket")
	}
	if err := s3utils.CheckValidBucketName(c.Bucket); err != nil {
		return nil, fmt.Errorf("S3 volume store: bucket name %q: %w; pass another --s3-bucket", c.Bucket, err)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return nil, fmt.Errorf("S3 volume store %s: no credentials; pass --s3-access-key and --s3-secret-key or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", endpoint)
	}
	cl, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure:       secure,
		Region:       c.Region,
		BucketLookup: minio.BucketLookupPath,
		// Volumes retry every call with their own bounded backoff (Options.RetryFor); minio's
		// ten internal retries on top would multiply the time a dead store takes to report.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 volume store %s: %w (check --s3-endpoint)", endpoint, err)
	}
	b := &s3Backend{c: cl, bucket: c.Bucket, name: "s3:" + endpoint + "/" + c.Bucket}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s3SetupTimeout)
		defer cancel()
	}
	attempts, err := withRetries(ctx, s3SetupTimeout, func() error { return b.ensureBucket(ctx, c.Region) })
	if err != nil {
		return nil, fmt.Errorf("S3 volume store %s: create or find bucket %s: %w (after %d attempts; check --s3-endpoint, the credentials, and that the store is up)", b.name, c.Bucket, err, attempts)
	}
	return b, nil
}

func (b *s3Backend) ensureBucket(ctx context.Context, region string) error {
	ok, err := b.c.BucketExists(ctx, b.bucket)
	if err != nil {
		return classifyS3(err)
	}
	if ok {
		return nil
	}
	err = b.c.MakeBucket(ctx, b.bucket, minio.MakeBucketOptions{Region: region})
	if err != nil {
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou":
			return nil // another host won the race
		case "BucketAlreadyExists":
			return permanentError{fmt.Errorf("bucket %s belongs to another account: pick another --s3-bucket: %w", b.bucket, err)}
		}
		return classifyS3(err)
	}
	return nil
}

// classifyS3 maps S3 error codes onto ErrNotFound and marks the ones retrying cannot fix.
func classifyS3(err error) error {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey":
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket",
		"InvalidBucketName", "AllAccessDisabled", "AccountProblem":
		return permanentError{err}
	}
	return err
}

func (b *s3Backend) Name() string { return b.name }

func (b *s3Backend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := b.c.PutObject(ctx, b.bucket, key, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return classifyS3(err)
	}
	return nil
}

func (b *s3Backend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := b.c.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, classifyS3(err)
	}
	// GetObject is lazy: Stat makes the request, so a missing key is reported here and not
	// on the first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, classifyS3(err)
	}
	return obj, nil
}

func (b *s3Backend) Stat(ctx context.Context, key string) (int64, error) {
	st, err := b.c.StatObject(ctx, b.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, classifyS3(err)
	}
	return st.Size, nil
}

func (b *s3Backend) Delete(ctx context.Context, key string) error {
	err := b.c.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{})
	if err != nil {
		if err := classifyS3(err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return classifyS3(err)
	}
	return nil
}

func (b *s3Backend) List(ctx context.Context, prefix string) ([]string, error) {
	// Cancelling on return stops minio's listing goroutine when we stop reading early.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var keys []string
	for obj := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, classifyS3(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys, nil
}

package s3events

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	// AWS's own format: no "s3:" before the event name, a URL-encoded key, no quotes on the etag.
	aws := `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventTime":"2026-01-02T03:04:05.000Z","eventName":"ObjectRemoved:Delete",
		"s3":{"bucket":{"name":"photos"},"object":{"key":"2026/a+b%2Bc.jpg","size":0,"eTag":"abc","versionId":"v1","sequencer":"0A1B"}}}]}`
	recs, err := Parse([]byte(aws))
	if err != nil {
		t.Fatal(err)
	}
	want := Record{Args: Args{Bucket: "photos", Key: "2026/a b+c.jpg", ETag: "abc", Event: "ObjectRemoved:Delete", Time: "2026-01-02T03:04:05.000Z", VersionID: "v1"}, Kind: Removed, Sequencer: "0A1B"}
	if len(recs) != 1 || recs[0] != want {
		t.Fatalf("Parse(AWS) = %+v, want %+v", recs, want)
	}
	// versitygw's and MinIO's: "s3:" before the name, the etag may come quoted.
	vgw := `{"Records":[{"eventName":"s3:ObjectCreated:Put","eventTime":"t","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":5,"eTag":"\"e\"","sequencer":"1"}}},
		{"eventName":"s3:ObjectTagging:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`
	recs, err = Parse([]byte(vgw))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Kind != Created || recs[0].Event != "ObjectCreated:Put" || recs[0].ETag != "e" || recs[1].Kind != Other {
		t.Fatalf("Parse(versitygw) = %+v", recs)
	}
	if strings.Join(recs[0].ID(), "|") == strings.Join(Record{Args: recs[0].Args, Sequencer: "2"}.ID(), "|") {
		t.Error("two events differing only in their sequencer have one id")
	}
	if _, err := Parse([]byte(`{"Service":"S3","Event":"s3:TestEvent","Bucket":"Test-Bucket"}`)); !errors.Is(err, ErrTestEvent) {
		t.Errorf("a test event: %v, want ErrTestEvent", err)
	}
	for _, bad := range []string{`not json`, `{}`, `{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":""},"object":{"key":"k"}}}]}`} {
		if _, err := Parse([]byte(bad)); err == nil || errors.Is(err, ErrTestEvent) {
			t.Errorf("Parse(%s) = %v, want an error saying what is wrong", bad, err)
		}
	}
}

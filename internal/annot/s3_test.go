package annot

import "testing"

func TestParseS3On(t *testing.T) {
	runParseCases(t, []parseCase{
		{
			name: "bucket alone: objects created",
			src:  "# on: s3:uploads\n",
			want: spec(func(s *Spec) { s.S3 = []S3On{{Bucket: "uploads", Created: true, Line: 1}} }),
		},
		{
			name: "prefix and both kinds, beside a subject",
			src:  "# on: orders.created\n# on: s3:uploads/incoming/ created,removed\n",
			want: spec(func(s *Spec) {
				s.On = []string{"orders.created"}
				s.S3 = []S3On{{Bucket: "uploads", Prefix: "incoming/", Created: true, Removed: true, Line: 2}}
			}),
		},
		{
			name: "removed only",
			src:  "# on: s3:uploads/tmp removed\n",
			want: spec(func(s *Spec) { s.S3 = []S3On{{Bucket: "uploads", Prefix: "tmp", Removed: true, Line: 1}} }),
		},
		{
			name: "not a bucket name",
			src:  "# on: s3:Up_loads\n",
			errs: []wantErr{{1, `bucket "Up_loads" is not an S3 bucket name`}},
		},
		{
			name: "unknown kind",
			src:  "# on: s3:uploads deleted\n",
			errs: []wantErr{{1, `"deleted" is not an event kind (created, removed)`}},
		},
		{
			name: "the same bucket and prefix twice",
			src:  "# on: s3:uploads/a\n# on: s3:uploads/a removed\n",
			errs: []wantErr{{2, "on: s3:uploads/a is already given on line 1"}},
		},
	})
}

package annot

import (
	"fmt"
	"regexp"
	"strings"
)

// S3On is one "on: s3:<bucket>[/<prefix>] [created|removed|created,removed]" line: the
// function runs for each object of bucket whose key starts with Prefix that is created (and,
// when asked, removed), from the S3 server's bucket notifications (package s3events).
type S3On struct {
	Bucket  string
	Prefix  string
	Created bool
	Removed bool
	Line    int
}

// S3Prefix starts an on: value that names a bucket rather than a subject.
const S3Prefix = "s3:"

const s3Usage = `write "on: s3:<bucket>[/<prefix>] [created|removed|created,removed]", e.g. "on: s3:uploads/incoming/" (objects created) or "on: s3:uploads removed"`

// bucketRE is an S3 bucket name as AWS allows one (and versitygw, MinIO).
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// parseS3On reads what follows "on: s3:".
func parseS3On(line int, value string) (S3On, error) {
	where, kinds, _ := strings.Cut(strings.TrimSpace(value), " ")
	bucket, prefix, _ := strings.Cut(where, "/")
	on := S3On{Bucket: bucket, Prefix: prefix, Line: line}
	if !bucketRE.MatchString(bucket) {
		return on, fmt.Errorf("on: s3: bucket %q is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-'); %s", bucket, s3Usage)
	}
	kinds = strings.TrimSpace(kinds)
	if kinds == "" {
		on.Created = true
		return on, nil
	}
	for k := range strings.SplitSeq(kinds, ",") {
		switch strings.TrimSpace(k) {
		case "created":
			on.Created = true
		case "removed":
			on.Removed = true
		default:
			return on, fmt.Errorf("on: s3: %q is not an event kind (created, removed); %s", k, s3Usage)
		}
	}
	return on, nil
}

// s3On records an "on: s3:..." line.
func (p *parser) s3On(line int, value string) {
	on, err := parseS3On(line, value)
	if err != nil {
		p.errorf(line, "%v", err)
		return
	}
	id := "on s3:" + on.Bucket + "/" + on.Prefix
	if first, ok := p.subj[id]; ok {
		p.errorf(line, "on: s3:%s/%s is already given on line %d; name the event kinds on one line (created,removed)", on.Bucket, on.Prefix, first)
		return
	}
	p.subj[id] = line
	p.spec.S3 = append(p.spec.S3, on)
}

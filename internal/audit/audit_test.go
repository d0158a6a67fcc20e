package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/testkit/natstest"
)

func TestAppendAndReadBack(t *testing.T) {
	_, js := natstest.Start(t)
	ctx := context.Background()
	if got, err := audit.Read(ctx, js, audit.Filter{}); err != nil || len(got) != 0 {
		t.Fatalf("before the stream exists: %v %v", got, err)
	}
	if err := audit.Ensure(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if err := audit.Append(ctx, js, audit.Entry{Who: "ada"}); err == nil {
		t.Fatal("an entry without an act was appended")
	}
	for _, e := range []audit.Entry{
		{Who: "ada", Face: "cli", Act: "user.add", Target: "bob"},
		{Who: "bob", Face: "web", Act: "approval.approve", Target: "job1"},
		{Who: "ada", Face: "web", Act: "secret set", Target: "k", Error: "refused"},
	} {
		if err := audit.Append(ctx, js, e); err != nil {
			t.Fatal(err)
		}
	}
	all, err := audit.Read(ctx, js, audit.Filter{})
	if err != nil || len(all) != 3 || all[0].Target != "bob" || all[2].Act != "secret set" || all[2].Seq != 3 {
		t.Fatalf("all: %+v %v", all, err)
	}
	ada, _ := audit.Read(ctx, js, audit.Filter{Who: "ada"})
	if len(ada) != 2 {
		t.Fatalf("ada's: %+v", ada)
	}
	later, _ := audit.Read(ctx, js, audit.Filter{Since: time.Now().Add(time.Hour)})
	if len(later) != 0 {
		t.Fatalf("since a future time: %+v", later)
	}
	last, _ := audit.Read(ctx, js, audit.Filter{Limit: 1})
	if len(last) != 1 || last[0].Who != "ada" {
		t.Fatalf("limit 1: %+v", last)
	}
}

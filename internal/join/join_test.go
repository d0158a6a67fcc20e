package join

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/natstest"
)

func open(t *testing.T) *Store {
	t.Helper()
	_, js := natstest.Start(t)
	s, err := Open(context.Background(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Parts gathered at once by many writers (hosts) complete the join exactly once, whatever
// their order and however often one is delivered again, and the payload lists a map's items in
// item order.
func TestGatherCompletesOnce(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	awaits := []string{"summary", "file"}
	deadline := time.Now().Add(time.Hour)
	parts := []Part{{Function: "summary", Data: []byte(`{"ok":true}`)}}
	for i := range 20 {
		parts = append(parts, Part{Function: "file", Index: i, Count: 20, Data: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	var completed, started atomic.Int32
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range parts {
				p := parts[(i*5+w*3)%len(parts)] // each writer in its own order, every part from every writer
				g, err := s.Add(ctx, "report", "flow-1", awaits, deadline, p)
				if err != nil {
					t.Error(err)
					return
				}
				if g.Completed {
					completed.Add(1)
				}
				if g.Started {
					started.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if completed.Load() != 1 || started.Load() != 1 {
		t.Fatalf("completed %d times, started %d times; want once each", completed.Load(), started.Load())
	}
	st, ok, err := s.Get(ctx, "report", "flow-1")
	if err != nil || !ok || !st.Done || st.Missing() != "" {
		t.Fatalf("state %+v %v %v", st, ok, err)
	}
	payload, err := s.Payload(ctx, "report", "flow-1", st)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"file":[`
	for i := range 20 {
		if i > 0 {
			want += ","
		}
		want += fmt.Sprintf(`{"n":%d}`, i)
	}
	want += `],"summary":{"ok":true}}`
	if string(payload) != want {
		t.Fatalf("payload %s\nwant    %s", payload, want)
	}
	if g, err := s.Fail(ctx, "report", "flow-1", awaits, deadline, "too late"); err != nil || g.Completed {
		t.Fatalf("failing a done join: %+v, %v", g, err)
	}
}

// What has not come is named, and a failed join takes no more parts.
func TestGatherFails(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	awaits := []string{"a", "b", "c"}
	deadline := time.Now().Add(time.Hour)
	for _, p := range []Part{{Function: "a", Data: []byte(`1`)}, {Function: "b", Index: 0, Count: 5, Data: []byte(`2`)}, {Function: "b", Index: 3, Count: 5, Data: []byte(`3`)}} {
		if _, err := s.Add(ctx, "j", "f", awaits, deadline, p); err != nil {
			t.Fatal(err)
		}
	}
	st, _, _ := s.Get(ctx, "j", "f")
	if m := st.Missing(); m != "b (2 of 5 items), c" {
		t.Fatalf("missing %q", m)
	}
	g, err := s.Fail(ctx, "j", "f", awaits, deadline, "timed out")
	if err != nil || !g.Completed || g.State.Failed != "timed out" {
		t.Fatalf("fail: %+v, %v", g, err)
	}
	if g, err := s.Add(ctx, "j", "f", awaits, deadline, Part{Function: "c", Data: []byte(`4`)}); err != nil || g.Completed || g.State.Done {
		t.Fatalf("a part after the failure: %+v, %v", g, err)
	}
	if g, err := s.Add(ctx, "j", "f2", awaits, deadline, Part{Function: "b", Index: 0, Count: 2}); err != nil || !g.Started {
		t.Fatal(g, err)
	}
	if g, err := s.Add(ctx, "j", "f2", awaits, deadline, Part{Function: "b", Index: 0, Count: 3}); err != nil || !g.Completed || g.State.Failed == "" {
		t.Fatalf("items of two different maps: %+v, %v", g, err)
	}
}

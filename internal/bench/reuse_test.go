package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReuseBench runs the reused-jail measurements (RunReuse) and prints them; REUSE_BENCH=1
// turns it on (REUSE_BENCH_N runs per measurement, 200 by default): it takes a minute or more
// and its numbers are only worth reading on a quiet machine.
func TestReuseBench(t *testing.T) {
	if os.Getenv("REUSE_BENCH") == "" {
		t.Skip("set REUSE_BENCH=1 to run the reused-jail measurements")
	}
	n := 200
	if s := os.Getenv("REUSE_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var progress strings.Builder
	r, err := RunReuse(ctx, n, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out strings.Builder
	ReportReuse(&out, r)
	t.Log("\n" + out.String())
	if r.Noop.Rates[0] <= 0 || r.Map <= 0 {
		t.Fatalf("nothing measured: %+v", r)
	}
}

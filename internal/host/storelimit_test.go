package host_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
)

func TestParseStoreLimit(t *testing.T) {
	cases := []struct {
		spec    string
		name    string
		want    bus.StoreLimit
		wantErr string
	}{
		{"AGENT_RESULTS=4Gi,30d", "AGENT_RESULTS", bus.StoreLimit{Bytes: 4 << 30, Age: 30 * 24 * time.Hour}, ""},
		{"agent_jobs=512Mi", "agent_jobs", bus.StoreLimit{Bytes: 512 << 20}, ""},
		{"AGENT_LOGS=-1,12h", "AGENT_LOGS", bus.StoreLimit{Bytes: -1, Age: 12 * time.Hour}, ""},
		{"AGENT_RUN=1000000", "AGENT_RUN", bus.StoreLimit{Bytes: 1e6}, ""},
		{"AGENT_RESULTS", "", bus.StoreLimit{}, "no store or no size"},
		{"=1Gi", "", bus.StoreLimit{}, "no store or no size"},
		{"AGENT_RESULTS=", "", bus.StoreLimit{}, "no store or no size"},
		{"AGENT_RESULTS=1GB", "", bus.StoreLimit{}, `size: "1GB" is not a size`},
		{"AGENT_RESULTS=0", "", bus.StoreLimit{}, "a size of 0 bytes"},
		{"AGENT_RESULTS=1Gi,soon", "", bus.StoreLimit{}, `age: "soon" is not a duration`},
		{"AGENT_RESULTS=1Gi,xd", "", bus.StoreLimit{}, `age: "xd" is not a number of days`},
		{"AGENT_RESULTS=1Gi,-1h", "", bus.StoreLimit{}, "must be longer than zero"},
	}
	for _, c := range cases {
		name, got, err := host.ParseStoreLimit(c.spec)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.spec) {
				t.Errorf("%q: got %v, want an error naming it and saying %q", c.spec, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", c.spec, err)
		case name != c.name || got != c.want:
			t.Errorf("%q: got %s %+v, want %s %+v", c.spec, name, got, c.name, c.want)
		}
	}
}

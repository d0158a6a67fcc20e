package functions

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/annot"
)

func TestUnknownTools(t *testing.T) {
	fn := func(name string, tools ...string) *Function {
		return &Function{Name: name, Spec: &annot.Spec{Tools: tools}}
	}
	fns := map[string]*Function{"agent": fn("agent", "wordcount", "wordcont"), "wordcount": fn("wordcount"), "other": fn("other", "agent")}
	errs := UnknownTools(fns)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "agent: tools: names wordcont, which is not a function here") ||
		!strings.Contains(errs[0].Error(), "served: [other wordcount]") {
		t.Errorf("UnknownTools = %v, want the one misspelt name", errs)
	}
}

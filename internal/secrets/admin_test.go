package secrets

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// The administration subjects: bad requests first, each refused with why and never with the
// value; then a set, a rotation and a removal, each logged with who asked and without the value.
func TestAdminRequests(t *testing.T) {
	ctx := ctxT(t)
	nc, js := natstest.Start(t)
	st, err := Open(ctx, js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := OpenHookKeys(ctx, js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	subs, err := (&Admin{Secrets: st, HookKeys: hk, HostID: "h1", Log: zap.New(core)}).Serve(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			s.Unsubscribe()
		}
	}()
	ask := func(subject, body string) AdminReply {
		t.Helper()
		m, err := nc.Request(subject, []byte(body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep AdminReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
		if strings.Contains(string(m.Data), "sekrit") {
			t.Fatalf("a reply holds the value: %s", m.Data)
		}
		return rep
	}
	for _, c := range []struct{ subject, body, want string }{
		{bus.SecretsSetSubject, `{"name":"x","value":"sekrit-value`, "not an AdminRequest JSON object"},
		{bus.SecretsSetSubject, `{"name":"x","value":"abc","who":"t"}`, "shorter than 4"},
		{bus.SecretsSetSubject, `{"name":"..x","value":"sekrit-value","who":"t"}`, "invalid secret name"},
		{bus.SecretsSetSubject, `{"name":"x","value":true,"who":"t"}`, "a bare boolean is not a secret"},
		{bus.SecretsRemoveSubject, `{"name":"nosuch","who":"t"}`, "no such secret"},
	} {
		if rep := ask(c.subject, c.body); !strings.Contains(rep.Error, c.want) || rep.Host != "h1" {
			t.Errorf("%s %s: %+v, want an error with %q", c.subject, c.body, rep, c.want)
		}
	}
	if rep := ask(bus.SecretsSetSubject, `{"name":"tok","value":"sekrit-one","who":"alice"}`); rep.Error != "" || rep.Replaced {
		t.Fatalf("set: %+v", rep)
	}
	if rep := ask(bus.SecretsSetSubject, `{"name":"tok","value":"sekrit-two","who":"alice"}`); rep.Error != "" || !rep.Replaced {
		t.Fatalf("rotate: %+v", rep)
	}
	if v, err := st.Get(ctx, "tok"); err != nil || string(v) != `"sekrit-two"` {
		t.Fatalf("after the rotation the store holds %s, %v", v, err)
	}
	if rep := ask(bus.SecretsSetSubject, `{"name":"hk","value":"sekrit-hook","hook":true,"who":"bob"}`); rep.Error != "" {
		t.Fatalf("set a webhook key: %+v", rep)
	}
	if names, _ := st.List(ctx); strings.Join(names, ",") != "tok" {
		t.Fatalf("the webhook key landed among the secrets: %v", names)
	}
	if rep := ask(bus.SecretsRemoveSubject, `{"name":"tok","who":"alice"}`); rep.Error != "" {
		t.Fatalf("rm: %+v", rep)
	}
	for _, msg := range []string{"secret administration: secret set", "secret administration: secret rotated (a new value replaced the stored one)",
		"secret administration: webhook key set", "secret administration: secret removed"} {
		if es := logs.FilterMessage(msg).All(); len(es) != 1 || es[0].ContextMap()["by"] == "" {
			t.Errorf("%q logged %d times: %v", msg, len(es), es)
		}
	}
	for _, e := range logs.All() {
		fields, _ := json.Marshal(e.ContextMap())
		if strings.Contains(e.Message+string(fields), "sekrit") {
			t.Fatalf("a log line holds a value: %s %s", e.Message, fields)
		}
	}
}

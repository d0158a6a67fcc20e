package dashboard_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/people"
)

// deploySet writes files into a fresh directory and stores them as the next deployment.
func deploySet(t *testing.T, st *deploy.Store, msg string, files map[string]string) *deploy.Deployment {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fns, errs := functions.Load(dir)
	if len(errs) > 0 {
		t.Fatalf("load %v: %v", files, errs)
	}
	d, stored, err := st.Deploy(context.Background(), deploy.Request{Functions: fns, By: "ci", Message: msg})
	if err != nil || !stored {
		t.Fatalf("deploy %q: stored=%t err=%v", msg, stored, err)
	}
	return d
}

// The Deployments page lists what was deployed with the current one marked, a diff shows the
// changed line, a developer rolls back (a new deployment equal to the first becomes current,
// recorded in the audit stream as hers), and a runner is shown no Rollback button and is
// refused 403 when posting one anyway.
func TestDeploymentsListDiffRollback(t *testing.T) {
	ps := newPeopleSite(t, map[string]string{"report.sh": "echo\n"}, fakeRunner{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(ps.h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Ensure(ctx, js, 1); err != nil { // serve makes it; the engine alone does not
		t.Fatal(err)
	}
	st, err := deploy.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	deploySet(t, st, "first", map[string]string{"greet.sh": "echo hello\n", "keep.sh": "echo same\n"})
	deploySet(t, st, "say hi instead", map[string]string{"greet.sh": "echo hi there\n", "keep.sh": "echo same\n"})
	robToken := ps.add("rob", people.Runner)
	devToken := ps.add("dev", people.Developer)

	ps.loginWith(devToken)
	ps.do("open the deployments page from the nav", chromedp.Click(`nav a[href="/deployments"]`), chromedp.WaitVisible(`tr[data-deployment="1"]`))
	if !present(ps.site, `tr[data-deployment="2"].current`) || present(ps.site, `tr[data-deployment="1"].current`) {
		t.Fatal("deployment 2 is not the one marked current")
	}
	row := get(ps.site, "read deployment 2's row", chromedp.Text(`tr[data-deployment="2"]`))
	if !strings.Contains(row, "say hi instead") || !strings.Contains(row, "ci") || !strings.Contains(row, "~greet") {
		t.Fatalf("deployment 2's row: %q, want its message, who and ~greet", row)
	}
	if present(ps.site, `tr[data-deployment="2"] button.rollback`) || !present(ps.site, `tr[data-deployment="1"] button.rollback`) {
		t.Fatal("a developer should see Rollback on deployment 1 and not on the current one")
	}
	ps.do("open the diff of 2", chromedp.Click(`tr[data-deployment="2"] a.diff`), chromedp.WaitVisible(`pre.diff`))
	del := get(ps.site, "read the removed lines", chromedp.Evaluate[string](`[...document.querySelectorAll("pre.diff span.del")].map(e => e.textContent).join("|")`))
	add := get(ps.site, "read the added lines", chromedp.Evaluate[string](`[...document.querySelectorAll("pre.diff span.add")].map(e => e.textContent).join("|")`))
	if !strings.Contains(del, "-echo hello") || !strings.Contains(add, "+echo hi there") {
		t.Fatalf("the diff removes %q and adds %q, want echo hello → echo hi there", del, add)
	}
	if summary := get(ps.site, "read the files", chromedp.Text(`details.diff-file summary`)); !strings.Contains(summary, "a/greet.sh") || strings.Contains(summary, "keep") {
		t.Fatalf("the diff's file: %q", summary)
	}
	ps.screenshot("deployment-diff")

	ps.do("roll back to 1", chromedp.Navigate(ps.url+"/deployments"), chromedp.WaitVisible(`tr[data-deployment="1"] button.rollback`),
		chromedp.Click(`tr[data-deployment="1"] button.rollback`), chromedp.WaitVisible(`tr[data-deployment="3"].current`))
	if ds := ps.dialogsSeen(); len(ds) == 0 || !strings.Contains(ds[len(ds)-1], "Roll back to deployment 1?") {
		t.Fatalf("no confirm before the rollback: %v", ds)
	}
	ps.screenshot("deployments-rolled-back")
	d1, _ := st.Get(ctx, 1)
	cur, err := st.Current(ctx)
	if err != nil || cur.Number != 3 || cur.RollbackOf != 1 || cur.By != "dev" || cur.Functions["greet"].Hash != d1.Functions["greet"].Hash {
		t.Fatalf("current after the rollback: %+v %v, want 3 = deployment 1's code, by dev", cur, err)
	}
	entries, err := audit.Read(ctx, js, audit.Filter{Who: "dev"})
	if err != nil || len(entries) != 1 || entries[0].Act != "rollback" || entries[0].Face != "web" || entries[0].Target != "3" {
		t.Fatalf("dev's audit entries: %+v %v, want one rollback from the web of deployment 3", entries, err)
	}
	ps.logout()

	ps.loginWith(robToken)
	ps.do("open the deployments page as a runner", chromedp.Navigate(ps.url+"/deployments"), chromedp.WaitVisible(`tr[data-deployment="3"]`))
	if present(ps.site, `button.rollback`) {
		t.Fatal("a runner is shown a Rollback button")
	}
	said := get(ps.site, "post a rollback from the page", chromedp.Evaluate[string](`(async () => {
		const r = await fetch("/deployments/2/rollback", {method: "POST", credentials: "same-origin", headers: {Accept: "application/json"}});
		return r.status + " " + (await r.json()).error; })()`, awaitPromise))
	if !strings.HasPrefix(said, "403 ") || !strings.Contains(said, "rob is runner") || !strings.Contains(said, "developer") {
		t.Fatalf("the runner's rollback: %q, want 403 naming the developer role", said)
	}
	if cur, err := st.Current(ctx); err != nil || cur.Number != 3 {
		t.Fatalf("after the runner's refused rollback the current deployment is %+v %v, want 3", cur, err)
	}
}

package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/oidctest"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

// operatorToken is the host's web token in these tests.
const operatorToken = "operator-token-0123456789abcdef"

// peopleSite is a host whose web face knows the users of a real store on its NATS, as serve
// builds it (app.webPeople): the guard follows the store. add creates users with tokens.
type peopleSite struct {
	*site
	store *people.Store
	cfg   web.Config
}

func newPeopleSite(t *testing.T, files map[string]string, run fakeRunner, configure func(*web.Config, string)) *peopleSite {
	t.Helper()
	h := hosttest.NewEngine(t, files, run)
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	follow, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	cfg := h.WebConfig()
	cfg.Auth.Token = operatorToken
	cfg.Auth.Users = webauth.FollowUsers(follow, store, nil)
	if err := cfg.Auth.Users.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	// The handler is set once the server's address is known: an OpenID client's redirect URL
	// names it.
	var handler http.Handler
	s := openSite(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	if configure != nil {
		configure(&cfg, s.url)
	}
	handler = web.New(cfg)
	return &peopleSite{site: s, store: store, cfg: cfg}
}

// add stores a user with a role and groups and returns its login token.
func (ps *peopleSite) add(name string, role people.Role, groups ...string) string {
	ps.t.Helper()
	ctx := context.Background()
	if _, err := ps.store.Add(ctx, people.User{Name: name, Role: role, Groups: groups, CreatedBy: "test"}); err != nil {
		ps.t.Fatal(err)
	}
	tok, err := ps.store.SetToken(ctx, name, "")
	if err != nil {
		ps.t.Fatal(err)
	}
	return tok
}

// loginWith logs in through the login form with tok and waits for the dashboard to name who
// is logged in.
func (ps *peopleSite) loginWith(tok string) {
	ps.t.Helper()
	ps.do("log in", chromedp.Navigate(ps.url+"/login"), chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, tok), chromedp.Click(`button[type=submit]`), chromedp.WaitVisible(`#me-name`))
}

func (ps *peopleSite) logout() {
	ps.t.Helper()
	ps.do("log out", chromedp.Click(`form.logout button`), chromedp.WaitVisible(`#token`))
}

// me is what the dashboard's header says of who is logged in: "name role".
func (ps *peopleSite) me() string {
	ps.t.Helper()
	return get(ps.site, "read who is logged in", chromedp.Evaluate[string](`document.querySelector("#me-name").textContent + " " + document.querySelector("#me-role").textContent`))
}

func present(s *site, selector string) bool {
	s.t.Helper()
	return get(s, "look for "+selector, chromedp.Evaluate[bool](`document.querySelector(`+"`"+selector+"`"+`) !== null`))
}

var awaitPromise = func(p *runtime.EvaluateParams) { yes := true; p.AwaitPromise = &yes }

// A runner and an approver log in with their own tokens. The runner sees no Approve button on
// a waiting step, and a decision posted from the page anyway is refused 403 saying what the
// role lacks; the approver approves, and the record names her. The header names who is logged
// in, and the admin-only links follow the role.
func TestRunnerCannotApproveApproverCan(t *testing.T) {
	ps := newPeopleSite(t, map[string]string{"plan.sh": "# approve\necho\n", "report.sh": "echo\n"}, fakeRunner{}, nil)
	robToken := ps.add("rob", people.Runner)
	adaToken := ps.add("ada", people.Approver, "ops")
	ps.publish("plan", "plan-1", `{}`)
	ps.h.Eventually("plan-1 waits for a decision", func() bool {
		rec, err := ps.h.Store.Get(context.Background(), "plan-1")
		return err == nil && rec.Status == jobtype.Waiting
	})

	ps.loginWith(robToken)
	if me := ps.me(); me != "rob runner" {
		t.Fatalf("the header says %q, want rob runner", me)
	}
	if present(ps.site, `nav a[href="/secrets"]`) || present(ps.site, `nav a[href="/users"]`) {
		t.Fatal("a runner's nav links to Secrets or Users")
	}
	ps.do("open the waiting step", chromedp.Navigate(ps.url+"/jobs/plan-1"), chromedp.WaitVisible(`#no-decide`))
	if present(ps.site, `#approve`) || present(ps.site, `#reject`) {
		t.Fatal("the runner is shown Approve or Reject")
	}
	if !present(ps.site, `#cancel`) {
		t.Fatal("the runner is not shown Cancel on a job of a function it may run")
	}
	ps.screenshot("runner-job")
	said := get(ps.site, "post the decision from the page", chromedp.Evaluate[string](`(async () => {
		const r = await fetch("/jobs/plan-1/decide", {method: "POST", credentials: "same-origin", headers: {Accept: "application/json"}, body: new URLSearchParams({decision: "approve"})});
		return r.status + " " + (await r.json()).error; })()`, awaitPromise))
	if !strings.HasPrefix(said, "403 ") || !strings.Contains(said, "rob is runner") || !strings.Contains(said, "approver") {
		t.Fatalf("the runner's decision: %q, want 403 saying rob is runner and deciding takes approver", said)
	}
	ps.do("open the secrets page anyway", chromedp.Navigate(ps.url+"/secrets"), chromedp.WaitVisible(`#error-message`))
	if msg := get(ps.site, "read the refusal", chromedp.Text(`#error-message`)); !strings.Contains(msg, "rob is runner") || !strings.Contains(msg, "admin") {
		t.Fatalf("the secrets page for a runner says %q", msg)
	}
	if rec, err := ps.h.Store.Get(context.Background(), "plan-1"); err != nil || rec.Status != jobtype.Waiting || rec.Approval.Decision != "" {
		t.Fatalf("plan-1 after the runner's refused decision: %+v %v", rec, err)
	}
	ps.logout()

	ps.loginWith(adaToken)
	if me := ps.me(); me != "ada approver" {
		t.Fatalf("the header says %q, want ada approver", me)
	}
	ps.do("approve from the inbox", chromedp.Navigate(ps.url+"/inbox"), chromedp.WaitVisible(`section[data-job="plan-1"] button.approve`),
		chromedp.Click(`section[data-job="plan-1"] button.approve`), chromedp.WaitVisible(`#decided`))
	ps.screenshot("approver-decided")
	rec := ps.h.Record("plan-1")
	if rec.Approval == nil || rec.Approval.Decision != jobs.Approved || rec.Approval.By != "ada" {
		t.Fatalf("plan-1's approval: %+v, want approved by ada", rec.Approval)
	}
	ps.logout()

	// The web token is still the operator's admin login: Secrets, Users and Audit are its.
	ps.loginWith(operatorToken)
	if !present(ps.site, `nav a[href="/users"]`) {
		t.Fatal("the operator's nav has no Users link")
	}
	ps.do("open the users page", chromedp.Click(`nav a[href="/users"]`), chromedp.WaitVisible(`tr[data-user="rob"]`))
	row := get(ps.site, "read ada's row", chromedp.Text(`tr[data-user="ada"]`))
	if !strings.Contains(row, "approver") || !strings.Contains(row, "ops") || strings.Contains(row, "none yet") {
		t.Fatalf("ada's row on the users page: %q", row)
	}
	page := get(ps.site, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	us, _ := ps.store.Load(context.Background())
	for _, u := range us.ByName {
		if strings.Contains(page, u.TokenHash) {
			t.Fatalf("the users page shows %s's token hash", u.Name)
		}
	}
}

// A viewer sees no Run form and no Cancel, and its run posted anyway is refused.
func TestViewerHasNoRunForm(t *testing.T) {
	ps := newPeopleSite(t, map[string]string{"report.sh": "echo\n"}, fakeRunner{}, nil)
	ps.loginWith(ps.add("vic", people.Viewer))
	ps.do("open the function", chromedp.Navigate(ps.url+"/functions/report"), chromedp.WaitVisible(`#no-run`))
	if present(ps.site, `#run-form`) {
		t.Fatal("a viewer is shown the run form")
	}
	said := get(ps.site, "post a run from the page", chromedp.Evaluate[string](`(async () => {
		const r = await fetch("/functions/report/run", {method: "POST", credentials: "same-origin", headers: {Accept: "application/json"}, body: new URLSearchParams({args: "{}"})});
		return r.status + " " + (await r.json()).error; })()`, awaitPromise))
	if !strings.HasPrefix(said, "403 ") || !strings.Contains(said, "vic is viewer") || !strings.Contains(said, "runner") {
		t.Fatalf("the viewer's run: %q", said)
	}
}

// People log in to the dashboard through a real OpenID provider (ORY Hydra) and its login form:
// the dashboard names them with the role their groups map to. The dashboard is reached as
// localhost and the provider as 127.0.0.1, two sites, so the callback is the cross-site
// navigation a real provider makes. A person in no mapped group is refused, told why.
func TestOIDCLoginThroughTheProvider(t *testing.T) {
	grace := oidctest.User{Name: "grace", Password: "hopper-1906", Email: "grace@example.test", Groups: []string{"eng", "ops"}}
	zed := oidctest.User{Name: "zed", Password: "zed-password", Email: "zed@example.test", Groups: []string{"sales"}}
	var public string
	ps := newPeopleSite(t, map[string]string{"report.sh": "echo\n"}, fakeRunner{}, func(cfg *web.Config, url string) {
		public = strings.Replace(url, "127.0.0.1", "localhost", 1)
		p := oidctest.Start(t, []string{public + webauth.CallbackPath}, grace, zed)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o, err := webauth.DiscoverOIDC(ctx, webauth.OIDCConfig{Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret,
			RedirectURL: public + webauth.CallbackPath, Roles: map[string]people.Role{"ops": people.Approver, "eng": people.Runner}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Auth.OIDC = o
	})
	login := func(u oidctest.User) {
		ps.do("log in as "+u.Name+" through the provider's form", chromedp.Navigate(public+"/jobs"), chromedp.WaitVisible(`#oidc-login`),
			chromedp.Click(`#oidc-login`), chromedp.WaitVisible(oidctest.UsernameSelector),
			chromedp.SendKeys(oidctest.UsernameSelector, u.Name), chromedp.SendKeys(oidctest.PasswordSelector, u.Password),
			chromedp.Click(oidctest.SubmitSelector))
	}
	login(grace)
	ps.do("land on the jobs page", chromedp.WaitVisible(`#me-name`), chromedp.WaitVisible(`table.jobs`))
	if where := get(ps.site, "read the address", chromedp.Location()); where != public+"/jobs" {
		t.Errorf("after the login the browser is at %s, want %s/jobs", where, public)
	}
	if me := ps.me(); me != "grace approver" {
		t.Fatalf("the header says %q, want grace approver (ops maps to approver, eng to runner: the highest wins)", me)
	}
	if groups := get(ps.site, "read the groups", chromedp.Text(`#me-groups`)); groups != "eng, ops" {
		t.Fatalf("the header's groups %q, want eng, ops", groups)
	}
	ps.screenshot("oidc-logged-in")
	ps.logout()

	login(zed)
	ps.do("be refused", chromedp.WaitVisible(`p[role=alert]`))
	if msg := get(ps.site, "read the refusal", chromedp.Text(`p[role=alert]`)); !strings.Contains(msg, "zed is in none of the groups this host gives a role to (eng, ops; the provider says groups: [\"sales\"])") {
		t.Fatalf("zed's login says %q", msg)
	}
	if present(ps.site, `#me-name`) {
		t.Fatal("zed, in no mapped group, was logged in")
	}
}

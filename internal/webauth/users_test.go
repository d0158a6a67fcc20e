package webauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/natstest"
)

const (
	adaToken = "ada-token-0123456789abcdef"
	robToken = "rob-token-0123456789abcdef"
)

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// twoUsers is ada, an approver in group ops, and rob, a runner of report-* only, as the store
// would hold them.
func twoUsers() people.Users {
	return people.Users{ByName: map[string]people.User{
		"ada": {Name: "ada", Role: people.Approver, Groups: []string{"ops"}, TokenHash: hashOf(adaToken)},
		"rob": {Name: "rob", Role: people.Runner, Functions: "report-*", TokenHash: hashOf(robToken)},
	}}
}

// whoami answers with the principal the guard let the request through as, as JSON.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p, ok := PrincipalOf(r)
	if !ok {
		http.Error(w, "no principal", http.StatusInternalServerError)
		return
	}
	json.NewEncoder(w).Encode(p)
})

// ask sends a request through g to whoami and returns the status and the principal it saw.
func ask(t *testing.T, g *Guard, r *http.Request) (int, people.Principal, string) {
	t.Helper()
	w := httptest.NewRecorder()
	g.Wrap(whoami).ServeHTTP(w, r)
	var p people.Principal
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("whoami: %v: %s", err, w.Body)
		}
	}
	return w.Code, p, w.Body.String()
}

func withCookie(c *http.Cookie) *http.Request {
	r := httptest.NewRequest("GET", "/jobs", nil)
	r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	return r
}

// loginAs logs in through the form with token and returns the session cookie.
func loginAs(t *testing.T, g *Guard, tok string) *http.Cookie {
	t.Helper()
	r := httptest.NewRequest("POST", "/login", strings.NewReader("token="+tok+"&next=%2Fjobs"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	g.Wrap(whoami).ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/jobs" {
		t.Fatalf("login with %s…: %d to %q: %s", tok[:4], w.Code, w.Header().Get("Location"), w.Body)
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatal("the login set no session cookie")
	return nil
}

// A user's token logs in as that user by every way the web token does: the form, a bearer
// header, a ?token= link. The web token stays the operator's admin login beside them.
func TestUserTokenLogsInAsTheUser(t *testing.T) {
	g := New(Config{Token: token, Users: StaticUsers(twoUsers())}, zaptest.NewLogger(t))

	status, p, body := ask(t, g, withCookie(loginAs(t, g, adaToken)))
	if status != 200 || p.Name != "ada" || !p.User || p.Role != people.Approver || p.Via != "token" || len(p.Groups) != 1 || p.Groups[0] != "ops" {
		t.Fatalf("ada's session: %d %+v %s", status, p, body)
	}

	r := httptest.NewRequest("POST", "/run/report-daily", nil)
	r.Header.Set("Authorization", "Bearer "+robToken)
	if status, p, body := ask(t, g, r); status != 200 || p.Name != "rob" || p.Role != people.Runner || p.Functions != "report-*" {
		t.Fatalf("rob's bearer token: %d %+v %s", status, p, body)
	}

	w := httptest.NewRecorder()
	g.Wrap(whoami).ServeHTTP(w, httptest.NewRequest("GET", "/inbox?token="+adaToken, nil))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/inbox" || len(w.Result().Cookies()) != 1 {
		t.Fatalf("ada's token link: %d to %q, cookies %v", w.Code, w.Header().Get("Location"), w.Result().Cookies())
	}
	if status, p, _ := ask(t, g, withCookie(w.Result().Cookies()[0])); status != 200 || p.Name != "ada" {
		t.Fatalf("the token link's session: %d %+v", status, p)
	}

	// The operator: the web token, by the form and by header, is admin and nobody's.
	if status, p, _ := ask(t, g, withCookie(loginAs(t, g, token))); status != 200 || p.User || p.Role != people.Admin || !strings.HasPrefix(p.Name, "admin (login session ") {
		t.Fatalf("the web token's session: %d %+v", status, p)
	}
	r = httptest.NewRequest("GET", "/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	if status, p, _ := ask(t, g, r); status != 200 || p.User || p.Role != people.Admin || p.Name != "admin (bearer token)" {
		t.Fatalf("the web token as bearer: %d %+v", status, p)
	}
	// A token nobody has is refused, whatever users exist.
	r = httptest.NewRequest("GET", "/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+adaToken+"x")
	if status, _, body := ask(t, g, r); status != 401 || !strings.Contains(body, "wrong token") {
		t.Fatalf("an unknown bearer token: %d %s", status, body)
	}
}

// A session is checked against the users as they are at each request: a changed role applies
// at once, a rotated token ends the sessions made with the old one, a removed user's ends.
func TestUserChangesReachLiveSessions(t *testing.T) {
	users := StaticUsers(twoUsers())
	g := New(Config{Token: token, Users: users}, zaptest.NewLogger(t))
	ada, rob := loginAs(t, g, adaToken), loginAs(t, g, robToken)

	us := twoUsers()
	u := us.ByName["ada"]
	u.Role, u.Groups = people.Developer, []string{"ops", "release"}
	us.ByName["ada"] = u
	users.set(us)
	if status, p, _ := ask(t, g, withCookie(ada)); status != 200 || p.Role != people.Developer || len(p.Groups) != 2 {
		t.Fatalf("after ada became developer: %d %+v", status, p)
	}

	us = twoUsers()
	u = us.ByName["rob"]
	u.TokenHash = hashOf("rob-new-token-0123456789")
	us.ByName["rob"] = u
	users.set(us)
	status, _, body := ask(t, g, withCookie(rob))
	if status != 401 || !strings.Contains(body, "the token of user rob was changed") {
		t.Fatalf("rob's session after his token was rotated: %d %s", status, body)
	}
	if status, _, _ := ask(t, g, withCookie(rob)); status != 401 {
		t.Fatalf("the ended session answered %d the second time", status)
	}
	r := httptest.NewRequest("GET", "/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+robToken)
	if status, _, _ := ask(t, g, r); status != 401 {
		t.Fatalf("rob's old token as bearer: %d, want 401", status)
	}

	delete(us.ByName, "ada")
	users.set(us)
	r = withCookie(ada)
	r.Header.Set("Accept", "text/html")
	status, _, body = ask(t, g, r)
	if status != 401 || !strings.Contains(body, "user ada was removed") || !strings.Contains(body, `name="token"`) {
		t.Fatalf("ada's session after she was removed: %d, want the login page saying why:\n%s", status, body)
	}
	// The web token is nobody's: no change of the users ends its sessions.
	if status, _, _ := ask(t, g, withCookie(loginAs(t, g, token))); status != 200 {
		t.Fatalf("the web token's session: %d", status)
	}
}

// Without users (no store, or an empty one) the web token is the only login, as before.
func TestNoUsersOnlyTheWebToken(t *testing.T) {
	for name, users := range map[string]*Users{"no store": nil, "no users": StaticUsers(people.Users{})} {
		g := New(Config{Token: token, Users: users}, zaptest.NewLogger(t))
		if status, p, _ := ask(t, g, withCookie(loginAs(t, g, token))); status != 200 || p.Role != people.Admin {
			t.Fatalf("%s: the web token: %d %+v", name, status, p)
		}
		r := httptest.NewRequest("GET", "/jobs", nil)
		r.Header.Set("Authorization", "Bearer "+adaToken)
		if status, _, _ := ask(t, g, r); status != 401 {
			t.Fatalf("%s: a user's token: %d, want 401", name, status)
		}
	}
}

// Require refuses an act the role does not include with 403 and a message naming the role it
// takes, and a Run of a function outside the user's glob; it lets the role's acts through.
func TestRequireRefusesWithTheReason(t *testing.T) {
	g := New(Config{Token: token, Users: StaticUsers(twoUsers())}, zaptest.NewLogger(t))
	mux := http.NewServeMux()
	for _, pattern := range []string{"POST /run/{name}", "POST /jobs/{id}/decide", "GET /secrets", "GET /jobs"} {
		mux.Handle(pattern, Require(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("done")) }), nil, zaptest.NewLogger(t)))
	}
	cases := []struct {
		tok, method, path string
		want              int
		says              []string
	}{
		{robToken, "POST", "/jobs/j1/decide", 403, []string{"forbidden", "rob is runner", "decide approvals", "approver"}},
		{robToken, "GET", "/secrets", 403, []string{"rob is runner", "admin"}},
		{robToken, "POST", "/run/deploy", 403, []string{"rob may run only the functions matching \"report-*\"", "deploy"}},
		{robToken, "POST", "/run/report-daily", 200, nil},
		{robToken, "GET", "/jobs", 200, nil},
		{adaToken, "POST", "/jobs/j1/decide", 200, nil},
		{adaToken, "GET", "/secrets", 403, []string{"ada is approver", "admin"}},
		{token, "GET", "/secrets", 200, nil},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("Authorization", "Bearer "+c.tok)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		w := httptest.NewRecorder()
		g.Wrap(mux).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s %s as %s…: %d, want %d: %s", c.method, c.path, c.tok[:3], w.Code, c.want, w.Body)
			continue
		}
		if c.want != 403 {
			continue
		}
		var body struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: the 403 is not JSON: %q %s", c.method, c.path, w.Header().Get("Content-Type"), w.Body)
		}
		for _, s := range c.says {
			if !strings.Contains(body.Error, s) {
				t.Errorf("%s %s as %s…: %q does not say %q", c.method, c.path, c.tok[:3], body.Error, s)
			}
		}
	}
}

// A route missing from Routes cannot be served: Require panics when the mux is built.
func TestRequireRefusesAnUnlistedRoute(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "not in webauth.Routes") {
			t.Fatalf("Require of an unlisted route: %v, want a panic naming Routes", r)
		}
	}()
	Require("POST /nuke", http.NotFoundHandler(), nil, nil)
}

// Through a real store on a real NATS: the guard follows the users as the store changes them
// (FollowUsers), and a session ends once its user is removed, without a read per request.
func TestFollowUsersEndsARemovedUsersSession(t *testing.T) {
	_, js := natstest.Start(t)
	ctx := context.Background()
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []people.User{{Name: "root", Role: people.Admin}, {Name: "ada", Role: people.Approver}} {
		if _, err := store.Add(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := store.SetToken(ctx, "ada", "")
	if err != nil {
		t.Fatal(err)
	}
	follow, stop := context.WithCancel(ctx)
	defer stop()
	users := FollowUsers(follow, store, zaptest.NewLogger(t))
	ready, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := users.Ready(ready); err != nil {
		t.Fatal(err)
	}
	g := New(Config{Token: token, Users: users}, zaptest.NewLogger(t))
	natstest.Eventually(t, "ada's token is known to the guard", func() bool { _, ok := users.byToken(tok); return ok })
	c := loginAs(t, g, tok)
	if status, p, _ := ask(t, g, withCookie(c)); status != 200 || p.Name != "ada" {
		t.Fatalf("ada's session: %d %+v", status, p)
	}
	if _, err := store.Remove(ctx, "ada"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "ada's session ends", func() bool {
		status, _, body := ask(t, g, withCookie(c))
		return status == 401 && strings.Contains(body, "user ada was removed")
	})
}

package webauth

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/people"
)

func TestParseOIDCRoles(t *testing.T) {
	roles, def, err := ParseOIDCRoles([]string{"ops=approver", "eng=runner", " admins = admin"}, "viewer")
	if err != nil || def != people.Viewer || roles["ops"] != people.Approver || roles["eng"] != people.Runner || roles["admins"] != people.Admin {
		t.Fatalf("roles %v, default %v, err %v", roles, def, err)
	}
	if _, def, err := ParseOIDCRoles(nil, "none"); err != nil || def != 0 {
		t.Fatalf("default none: %v %v", def, err)
	}
	for _, c := range []struct {
		specs []string
		def   string
		says  string
	}{
		{[]string{"ops"}, "none", "want <group>=<role>"},
		{[]string{"=admin"}, "none", "want <group>=<role>"},
		{[]string{"ops=boss"}, "none", `unknown role "boss"`},
		{[]string{"ops=runner", "ops=admin"}, "none", `group "ops" is mapped twice`},
		{nil, "root", "--oidc-default-role"},
	} {
		if _, _, err := ParseOIDCRoles(c.specs, c.def); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v, default %q: %v, want an error saying %q", c.specs, c.def, err, c.says)
		}
	}
}

// oidcGuard is a guard whose OpenID login maps ops to approver and eng to runner.
func oidcGuard(t *testing.T, def people.Role, users people.Users) (*Guard, *OIDC) {
	o := &OIDC{cfg: OIDCConfig{Issuer: "https://id.example", GroupsClaim: "groups", DefaultRole: def,
		Roles: map[string]people.Role{"ops": people.Approver, "eng": people.Runner}}}
	return New(Config{Token: token, Users: StaticUsers(users), OIDC: o}, zaptest.NewLogger(t)), o
}

// The provider's claims make the principal: preferred_username (else email), the highest role
// of the mapped groups, else the default; with neither the person is refused, told why. A
// stored user of the same name wins with its own role and groups.
func TestOIDCClaimsMakeThePrincipal(t *testing.T) {
	g, o := oidcGuard(t, 0, twoUsers())
	claims := map[string]any{"preferred_username": "eve", "email": "eve@example.com", "groups": []any{"eng", "ops", "other"}}
	s, p, err := g.oidcSession(o, claims)
	if err != nil || p.Name != "eve" || !p.User || p.Role != people.Approver || p.Via != "oidc" || strings.Join(p.Groups, ",") != "eng,ops,other" || s.stored {
		t.Fatalf("eve: %+v %v", p, err)
	}
	if got, err := g.principal(&s, "login session x"); err != nil || got.Name != "eve" || got.Role != people.Approver {
		t.Fatalf("eve's session: %+v %v", got, err)
	}

	_, p, err = g.oidcSession(o, map[string]any{"email": "sam@example.com", "groups": "eng"})
	if err != nil || p.Name != "sam@example.com" || p.Role != people.Runner {
		t.Fatalf("no preferred_username, one group as a string: %+v %v", p, err)
	}

	_, _, err = g.oidcSession(o, map[string]any{"preferred_username": "zed", "groups": []any{"sales"}})
	if err == nil || !strings.Contains(err.Error(), "zed is in none of the groups this host gives a role to (eng, ops") || !strings.Contains(err.Error(), `"sales"`) {
		t.Fatalf("a person in no mapped group with no default role: %v", err)
	}
	if _, _, err := g.oidcSession(o, map[string]any{"sub": "123"}); err == nil || !strings.Contains(err.Error(), "neither preferred_username nor email") {
		t.Fatalf("no name: %v", err)
	}

	gv, ov := oidcGuard(t, people.Viewer, twoUsers())
	if _, p, err := gv.oidcSession(ov, map[string]any{"preferred_username": "zed"}); err != nil || p.Role != people.Viewer {
		t.Fatalf("with default role viewer: %+v %v", p, err)
	}

	// rob is a stored runner of report-*: the provider's groups do not make him an approver.
	s, p, err = g.oidcSession(o, map[string]any{"preferred_username": "rob", "groups": []any{"ops"}})
	if err != nil || p.Role != people.Runner || p.Functions != "report-*" || !s.stored {
		t.Fatalf("rob, stored: %+v %v", p, err)
	}
	// ... and his removal ends that login rather than fall back to the claims.
	us := twoUsers()
	delete(us.ByName, "rob")
	g.cfg.Users.set(us)
	if _, err := g.principal(&s, "login session x"); err == nil || !strings.Contains(err.Error(), "user rob was removed") {
		t.Fatalf("rob's OpenID session after his removal: %v", err)
	}
}

// A configuration that cannot work is refused before any request, naming the flag to fix; an
// issuer that answers with no discovery document fails at once; one that does not answer is
// asked again until the start's deadline, then fails naming --oidc-issuer.
func TestDiscoverOIDCRefuses(t *testing.T) {
	good := OIDCConfig{Issuer: "http://127.0.0.1:1", ClientID: "host", ClientSecret: "s", RedirectURL: "http://127.0.0.1:8080" + CallbackPath,
		Roles: map[string]people.Role{"ops": people.Approver}}
	for _, c := range []struct {
		change func(*OIDCConfig)
		says   string
	}{
		{func(c *OIDCConfig) { c.Issuer = "id.example.com" }, "--oidc-issuer"},
		{func(c *OIDCConfig) { c.ClientID = "" }, "--oidc-client-id"},
		{func(c *OIDCConfig) { c.ClientSecret = "" }, "--oidc-client-secret-file"},
		{func(c *OIDCConfig) { c.RedirectURL = "http://127.0.0.1:8080/callback" }, "--oidc-redirect-url"},
		{func(c *OIDCConfig) { c.Roles = nil }, "--oidc-default-role"},
	} {
		cfg := good
		c.change(&cfg)
		if _, err := DiscoverOIDC(context.Background(), cfg, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error naming %s", cfg, err, c.says)
		}
	}

	notOIDC := httptest.NewServer(http.NotFoundHandler())
	defer notOIDC.Close()
	cfg := good
	cfg.Issuer = notOIDC.URL
	start := time.Now()
	if _, err := DiscoverOIDC(context.Background(), cfg, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "--oidc-issuer "+notOIDC.URL) ||
		!strings.Contains(err.Error(), "not usable") || time.Since(start) > 5*time.Second {
		t.Fatalf("an issuer without a discovery document: %v after %s", err, time.Since(start))
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Issuer = "http://" + l.Addr().String()
	l.Close() // nothing answers there now
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := DiscoverOIDC(ctx, cfg, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "--oidc-issuer "+cfg.Issuer+" does not answer") {
		t.Fatalf("an issuer that does not answer: %v", err)
	}
}

// The login page offers the provider when there is one; the callback without the state cookie
// of the browser that began the login is refused, whatever its query says.
func TestOIDCLoginPageAndForeignCallback(t *testing.T) {
	g, _ := oidcGuard(t, people.Viewer, twoUsers())
	w := httptest.NewRecorder()
	g.Wrap(whoami).ServeHTTP(w, httptest.NewRequest("GET", "/login?next=/inbox", nil))
	if !strings.Contains(w.Body.String(), `href="/login/oidc?next=%2finbox"`) || !strings.Contains(w.Body.String(), "Log in with https://id.example") {
		t.Fatalf("the login page does not offer the provider:\n%s", w.Body)
	}
	w = httptest.NewRecorder()
	g.Wrap(whoami).ServeHTTP(w, httptest.NewRequest("GET", CallbackPath+"?state=abc&code=xyz", nil))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "did not come back to the browser that started it") || len(g.sessions) != 0 {
		t.Fatalf("a callback with no state cookie: %d %s", w.Code, w.Body)
	}
	g2 := New(Config{Token: token}, zaptest.NewLogger(t))
	w = httptest.NewRecorder()
	g2.Wrap(whoami).ServeHTTP(w, httptest.NewRequest("GET", "/login/oidc", nil))
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "no OpenID login") {
		t.Fatalf("/login/oidc without a provider: %d %s", w.Code, w.Body)
	}
}

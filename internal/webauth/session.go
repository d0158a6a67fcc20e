package webauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/people"
)

// How a session's user logged in (session.via); "" is the host's web token.
const (
	viaToken = "token"
	viaOIDC  = "oidc"
)

// session is a login, held by the host: its expiry, and whose it is. A user's session keeps
// the user's name, not a copy of the user, so that every request sees the user as the store
// has it then (principal).
type session struct {
	expires time.Time
	via     string // "" (the web token), viaToken or viaOIDC
	user    string // the user's name, for viaToken and viaOIDC
	// tokenHash is the user's token hash at login (viaToken): a rotated token ends the session.
	tokenHash string
	// stored says a stored user of the name gave the session its role at login (viaOIDC): its
	// removal ends the session rather than fall back to the provider's claims.
	stored bool
	// claims is who the provider vouched for (viaOIDC), used while no stored user has the name.
	claims people.Principal
}

// sessionKey is what the guard keeps of a session id: its hash, so the map holds nothing a
// browser could present.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// randomID is 32 random bytes, URL-safe.
func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// startSession makes a new session, random and server-side: nothing about it can be computed
// from the token, each login gets its own, and logging out ends it for good. by says how it
// was made, for the log.
func (g *Guard) startSession(w http.ResponseWriter, r *http.Request, s session, by string) {
	id := randomID()
	now := g.now()
	key := sessionKey(id)
	s.expires = now.Add(g.cfg.SessionTTL)
	g.mu.Lock()
	if len(g.sessions) >= maxSessions {
		g.pruneLocked(now)
	}
	g.sessions[key] = &s
	g.mu.Unlock()
	who := "the web token"
	if s.user != "" {
		who = s.user
	}
	g.log.Info("web login", zap.String("from", r.RemoteAddr), zap.String("by", by), zap.String("as", who),
		zap.String("session", key[:8]), zap.Duration("ttl", g.cfg.SessionTTL))
	http.SetCookie(w, g.sessionCookie(r, id, int(g.cfg.SessionTTL/time.Second)))
}

// lookupSession finds the live session of a cookie's value; expired ones are dropped.
func (g *Guard) lookupSession(value string) (key string, s *session, err error) {
	key = sessionKey(value)
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[key]
	switch {
	case !ok:
		return key, nil, errExpired
	case !g.now().Before(s.expires):
		delete(g.sessions, key)
		return key, nil, errExpired
	}
	return key, s, nil
}

// endSession drops a session the users' changes ended.
func (g *Guard) endSession(key string, why error) {
	g.mu.Lock()
	delete(g.sessions, key)
	g.mu.Unlock()
	g.log.Info("web login ended", zap.String("session", key[:8]), zap.String("reason", why.Error()))
}

// pruneLocked drops expired sessions and, if that frees nothing, the one closest to expiry.
func (g *Guard) pruneLocked(now time.Time) {
	var soonest string
	for k, s := range g.sessions {
		if !now.Before(s.expires) {
			delete(g.sessions, k)
		} else if soonest == "" || s.expires.Before(g.sessions[soonest].expires) {
			soonest = k
		}
	}
	if len(g.sessions) >= maxSessions {
		delete(g.sessions, soonest)
	}
}

// logout ends the request's session on the server, so its cookie is worth nothing even where
// the browser kept a copy, and clears the cookie.
func (g *Guard) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName(r)); err == nil {
		key := sessionKey(c.Value)
		g.mu.Lock()
		_, had := g.sessions[key]
		delete(g.sessions, key)
		g.mu.Unlock()
		if had {
			g.log.Info("web logout", zap.String("from", r.RemoteAddr), zap.String("session", key[:8]))
		}
	}
	http.SetCookie(w, g.sessionCookie(r, "", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// cookieName is the login cookie's name for r: the __Host- one over TLS.
func cookieName(r *http.Request) string {
	if r.TLS != nil {
		return SecureCookieName
	}
	return CookieName
}

func (g *Guard) sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	// Path=/ and no Domain: the cookie goes back to this host name only (not its subdomains),
	// which __Host- demands and which is right without it too. SameSite=Strict: no page of
	// another site can make a browser send it, not even a top-level link (the OpenID
	// callback, which arrives from the provider's site, therefore lands on a page of this host
	// that moves on by itself: see oidc.go).
	return &http.Cookie{Name: cookieName(r), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

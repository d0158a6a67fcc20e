package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/webauth"
)

// peopleLoadTimeout bounds the first read of the users and the OpenID provider's discovery at
// start: a host that cannot know who may log in does not start as if it did.
const peopleLoadTimeout = 30 * time.Second

// webPeople completes the web guard's configuration with who may log in besides the web
// token: the stored users, followed for as long as the host runs (a removal or a new role
// reaches the next request of a session), and the OpenID provider when --oidc-issuer names
// one, whose discovery document must be read now (DiscoverOIDC says what it waits for).
func webPeople(ctx context.Context, cfg Config, js jetstream.JetStream, h *host.Host, log *zap.Logger) (webauth.Config, error) {
	w := cfg.Web
	store, err := people.Open(ctx, js, cfg.Streams.Replicas)
	if err != nil {
		return w, err
	}
	followCtx, stop := context.WithCancel(context.Background())
	h.AtShutdown(stop)
	w.Users = webauth.FollowUsers(followCtx, store, log.Named("users"))
	loadCtx, cancel := context.WithTimeout(ctx, peopleLoadTimeout)
	defer cancel()
	if err := w.Users.Ready(loadCtx); err != nil {
		return w, err
	}
	if cfg.OIDC.Issuer == "" {
		return w, nil
	}
	o := cfg.OIDC
	if o.RedirectURL == "" && cfg.ApprovalURL != "" {
		// The address people reach the host at (--public-url, else http://<--http>).
		o.RedirectURL = strings.TrimSuffix(cfg.ApprovalURL, "/") + webauth.CallbackPath
	}
	if o.RedirectURL == "" {
		return w, fmt.Errorf("--oidc-issuer needs the address the provider sends people back to: give --public-url (the callback is <public-url>%s) or --oidc-redirect-url", webauth.CallbackPath)
	}
	if w.OIDC, err = webauth.DiscoverOIDC(loadCtx, o, log.Named("oidc")); err != nil {
		return w, err
	}
	return w, nil
}

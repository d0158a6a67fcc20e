package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/secrets"
)

// SetSecret has a host seal value with the hosts' key and store it under name (with hook, as
// a webhook key), as `host secrets set` and the dashboard's Secrets page do: no key file is
// needed here. replaced says a stored value was overwritten (a rotation). who names the asker
// for the host's log and the audit entry (a user's name, or what the face knows of the
// operator). Neither the request's error nor the reply ever holds the value.
func (c *Client) SetSecret(ctx context.Context, name string, value json.RawMessage, hook bool, who string) (replaced bool, err error) {
	return c.SetSecretAs(ctx, name, value, hook, who, "")
}

// SetSecretAs is SetSecret from face (web, cli, nats), which the host's audit entry names.
func (c *Client) SetSecretAs(ctx context.Context, name string, value json.RawMessage, hook bool, who, face string) (replaced bool, err error) {
	rep, err := c.secretsRequest(ctx, bus.SecretsSetSubject, secrets.AdminRequest{Name: name, Value: value, Hook: hook, Who: who, Face: face})
	if err != nil {
		return false, err
	}
	return rep.Replaced, nil
}

// RemoveSecret has a host remove a secret (with hook, a webhook key).
func (c *Client) RemoveSecret(ctx context.Context, name string, hook bool, who string) error {
	return c.RemoveSecretAs(ctx, name, hook, who, "")
}

// RemoveSecretAs is RemoveSecret from face (web, cli, nats), which the host's audit entry names.
func (c *Client) RemoveSecretAs(ctx context.Context, name string, hook bool, who, face string) error {
	_, err := c.secretsRequest(ctx, bus.SecretsRemoveSubject, secrets.AdminRequest{Name: name, Hook: hook, Who: who, Face: face})
	return err
}

// ErrHostRefused wraps a host's refusal of a secret administration request.
var ErrHostRefused = errors.New("refused by the host")

func (c *Client) secretsRequest(ctx context.Context, subject string, req secrets.AdminRequest) (*secrets.AdminReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode the request for %s: %w", subject, err)
	}
	m, err := c.NC.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("no host answers %s: is a host with a secrets key (serve --secrets-key-file) running on this NATS, "+
				"and may this user publish there? %w", subject, err)
		}
		return nil, fmt.Errorf("ask a host on %s: %w", subject, err)
	}
	var rep secrets.AdminReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("the answer on %s is not a reply of a host: %w", subject, err)
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("%w %s: %s", ErrHostRefused, rep.Host, rep.Error)
	}
	return &rep, nil
}

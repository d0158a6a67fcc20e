package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
)

// redactor hides the job's secret values; the zero value hides nothing.
type redactor struct{ r *secrets.Redactor }

func (r *redactor) add(o *secrets.Redactor) {
	if o == nil || o.Empty() {
		return
	}
	if r.r == nil {
		r.r = secrets.NewRedactor()
	}
	r.r.Merge(o)
}

func (r redactor) Empty() bool { return r.r == nil || r.r.Empty() }

// line redacts one log line; cut says the line lost its end to the line cap, so that a part of
// a secret left at the cut goes too.
func (r redactor) line(b []byte, cut bool) []byte {
	switch {
	case r.Empty():
		return b
	case cut:
		return r.r.RedactCut(b, false, true)
	default:
		return r.r.RedactLine(b)
	}
}

// cutStart redacts text whose start was cut off (a tail), dropping a part of a secret left there.
func (r redactor) cutStart(b []byte) []byte {
	if r.Empty() {
		return b
	}
	return r.r.RedactCut(b, true, false)
}

// result redacts a run's result by value (secrets.Redactor.RedactJSON): it stays valid JSON.
func (r redactor) result(b []byte) ([]byte, error) {
	if r.Empty() {
		return b, nil
	}
	return r.r.RedactJSON(b)
}

// redactErr hides secret values in an error's text, keeping whether it is terminal.
func (r redactor) redactErr(err error) error {
	if err == nil || r.Empty() {
		return err
	}
	msg := r.r.RedactString(err.Error())
	if msg == err.Error() {
		return err
	}
	if jobtype.IsTerminal(err) {
		return &jobtype.TerminalError{Err: errors.New(msg)}
	}
	return errors.New(msg)
}

// resolveSecrets replaces $secret: arguments and env: values by the stored secrets and returns
// the payload to hand the job, the env: lines as KEY=VALUE, and records every value in red so
// that the job's output, result and errors can be scrubbed of them.
func (r *Runner) resolveSecrets(ctx context.Context, job *task, raw []byte, args map[string]any, red *redactor) ([]byte, []string, error) {
	fn := job.Fn
	env := make([]string, 0, len(fn.Spec.Env))
	for _, e := range fn.Spec.Env {
		if e.Sealed != nil {
			placeholder, err := r.seal(ctx, job, e, red)
			if err != nil {
				return nil, nil, err
			}
			env = append(env, e.Name+"="+placeholder)
			continue
		}
		if e.Secret == "" {
			env = append(env, e.Name+"="+e.Value)
			continue
		}
		if r.cfg.Secrets == nil {
			return nil, nil, terminal("env %s: secret %q cannot be resolved: this host has no secret store", e.Name, e.Secret)
		}
		v, rd, err := r.cfg.Secrets.Resolve(ctx, e.Secret)
		if err != nil {
			return nil, nil, secretErr(fmt.Sprintf("env %s", e.Name), err)
		}
		red.add(rd)
		env = append(env, e.Name+"="+v)
	}
	if !bytes.Contains(raw, []byte(secrets.RefPrefix)) {
		return raw, env, nil // the common case: nothing to resolve, keep the payload as sent
	}
	// Before the store is read: any caller may name any secret, and only the function's author
	// decides which secrets it may receive (webhook keys and other functions' credentials must
	// not be one request away).
	if err := checkDeclared(fn, secrets.Refs(args)); err != nil {
		return nil, nil, err
	}
	if r.cfg.Secrets == nil {
		return nil, nil, terminal("the payload refers to a secret ($secret:...), but this host has no secret store")
	}
	resolved, rd, err := r.cfg.Secrets.ResolveArgs(ctx, args, fn.Spec.DeclaresSecret)
	if err != nil {
		return nil, nil, secretErr("arguments", err)
	}
	red.add(rd)
	out, err := json.Marshal(resolved)
	if err != nil {
		return nil, nil, fmt.Errorf("encode arguments: %w", err)
	}
	return out, env, nil
}

// checkDeclared refuses, as a terminal error, the first secret in refs that fn's annotations do
// not declare; the fix is in the function's source, so retrying cannot help.
func checkDeclared(fn *functions.Function, refs []string) error {
	for _, name := range refs {
		if !fn.Spec.DeclaresSecret(name) {
			return terminal("secret %q is not declared by function %q: add \"%s secrets: %s\" to its annotations "+
				"(a function receives only the secrets its own annotations declare)",
				name, fn.Name, annot.CommentPrefix(fn.Entry), name)
		}
	}
	return nil
}

// secretErr makes a missing secret terminal (setting it and replaying the job is the fix) and
// leaves a store that cannot be reached to be retried.
func secretErr(where string, err error) error {
	if errors.Is(err, secrets.ErrNotFound) || errors.Is(err, secrets.ErrUndeclared) {
		return terminal("%s: %w", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// seal resolves a sealed env: line for job: the secret goes to the job's egress policy, which
// puts it in the headers of requests to its hosts, and the job gets a placeholder of its own.
func (r *Runner) seal(ctx context.Context, job *task, e annot.Env, red *redactor) (string, error) {
	switch {
	case r.cfg.Secrets == nil:
		return "", terminal("env %s: sealed secret %q cannot be resolved: this host has no secret store", e.Name, e.Sealed.Ref)
	case r.cfg.Egress == nil || r.cfg.Egress.CA() == nil:
		return "", terminal("env %s is sealed, but this host's egress proxy cannot terminate TLS (it has no CA); run the function on a host that can", e.Name)
	}
	v, rd, err := r.cfg.Secrets.ResolveField(ctx, e.Sealed.Ref)
	if err != nil {
		return "", secretErr(fmt.Sprintf("env %s", e.Name), err)
	}
	if v == "" || strings.ContainsAny(v, "\r\n\x00") {
		return "", terminal("env %s: sealed secret %q is empty or holds a line break, so it cannot be sent in a header; set it again", e.Name, e.Sealed.Ref)
	}
	placeholder, ok := job.placeholders[e.Name]
	if !ok {
		if placeholder, err = egress.NewPlaceholder(); err != nil {
			return "", err
		}
	}
	red.add(rd)
	job.sealed = append(job.sealed, egress.Sealed{Name: e.Name, Placeholder: placeholder, Value: v, Hosts: e.Sealed.Hosts})
	return placeholder, nil
}

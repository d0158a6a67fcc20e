package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/signature"
	"github.com/agenthost/host/internal/webauth"
)

// DefaultRunMaxBytes bounds a run form's body when Config.RunMaxBytes is zero: POST /run's
// default, since the form sends the same payload.
const DefaultRunMaxBytes = 1 << 20

// errNoFunction is in the refusal of a function no host announces and this host's directory
// does not have: a 404.
var errNoFunction = errors.New("no such function")

// badRequest is a refusal of what the caller sent: a 400 (or 413), with a message for them.
type badRequest struct {
	code int
	msg  string
}

func (e *badRequest) Error() string { return e.msg }

// runField is one input of the run form: a parameter of main, and how the page asks for it.
type runField struct {
	signature.Param
	// Input is how the page asks for it: "json" (a textarea checked as JSON, for objects and
	// lists), "bool" (a choice), "number" or "text".
	Input string
	// Kinds names the JSON kinds it accepts for the page's own check ("int float null"), in
	// the words of run.js; "" when any is.
	Kinds string
	// Example is a value of its type, showing its shape in the empty field ({"key":"text"}).
	Example string
	// Hint says what a value of a type the host does not read looks like: a Windmill resource
	// type (RT.Anthropic) is an object, whose fields main reads are named from the source.
	Hint string
}

var kindNames = []struct {
	k    signature.Kind
	name string
}{{signature.String, "string"}, {signature.Int, "int"}, {signature.Float, "float"}, {signature.Bool, "bool"},
	{signature.List, "list"}, {signature.Object, "object"}, {signature.Null, "null"}}

func newRunField(p signature.Param, src []byte) runField {
	f := runField{Param: p, Input: "text", Example: p.Example()}
	var names []string
	for _, kn := range kindNames {
		if p.Accepts&kn.k != 0 {
			names = append(names, kn.name)
		}
	}
	f.Kinds = strings.Join(names, " ")
	switch a := p.Accepts &^ signature.Null; {
	case a == 0:
	case a&(signature.List|signature.Object) != 0 && a&^(signature.List|signature.Object) == 0:
		f.Input = "json"
	case a == signature.Bool:
		f.Input = "bool"
	case a&^(signature.Int|signature.Float) == 0:
		f.Input = "number"
	}
	if p.Accepts == 0 && strings.HasPrefix(p.Type, "RT.") {
		f.Input = "json"
		f.Hint, f.Example = resourceHint(p, src)
	}
	return f
}

// resourceHint describes an argument of a Windmill resource type (RT.Anthropic), which only
// Windmill defines, so the host does not read it: an object, with the fields main reads of it
// (`anthropic?.apiKey`) as its example, usually held in a secret.
func resourceHint(p signature.Param, src []byte) (hint, example string) {
	use := regexp.MustCompile(`\b` + regexp.QuoteMeta(p.Name) + `\??\.([\p{L}_$][\p{L}\p{N}_$]*)`)
	var fields []string
	for _, m := range use.FindAllSubmatch(src, -1) {
		if f := string(m[1]); !slices.Contains(fields, f) {
			fields = append(fields, f)
		}
	}
	hint = p.Type + " is a Windmill resource type, which the host does not read: give a JSON object"
	if len(fields) > 0 {
		hint += " with the fields main reads of it: " + strings.Join(fields, ", ")
		shape := map[string]string{}
		for _, f := range fields {
			shape[f] = "…"
		}
		b, _ := json.Marshal(shape)
		example = string(b)
	}
	return hint + "; or choose a secret that holds one", example
}

// runFields are the inputs of fn's run form: every named parameter of main.
func runFields(fn *functions.Function) []runField {
	src, err := readEntry(fn)
	if err != nil {
		return nil
	}
	var out []runField
	for _, p := range signature.Fields(fn.Runtime, src) {
		out = append(out, newRunField(p, src))
	}
	return out
}

var jsonNumber = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$`)

// fieldValue is the JSON value a field's text stands for, read by the kinds its parameter
// accepts: a number where a number is accepted and the text is one, and so on; anything else
// is the text as a string, which signature.Check then judges as the host would. Only JSON
// that does not parse, in a field for objects and lists, is refused here. run.js reads a
// field the same way, so the page refuses what the host would, in its words.
func fieldValue(p signature.Param, text string) (json.RawMessage, error) {
	trimmed := strings.TrimSpace(text)
	a := p.Accepts
	switch {
	case (a == 0 || a&(signature.List|signature.Object) != 0) && (strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "[")):
		if err := jsonSyntax([]byte(trimmed)); err != nil {
			return nil, &badRequest{http.StatusBadRequest, fmt.Sprintf("argument %q: not JSON: %v", p.Name, err)}
		}
		return json.RawMessage(trimmed), nil
	case (a == 0 || a&(signature.Int|signature.Float) != 0) && jsonNumber.MatchString(trimmed),
		(a == 0 || a&signature.Bool != 0) && (trimmed == "true" || trimmed == "false"),
		(a == 0 || a&signature.Null != 0) && trimmed == "null":
		return json.RawMessage(trimmed), nil
	case a == 0 && json.Valid([]byte(trimmed)):
		return json.RawMessage(trimmed), nil
	}
	return jsonString(text), nil
}

func jsonSyntax(b []byte) error {
	var v any
	return json.Unmarshal(b, &v)
}

// jsonString encodes s as JSON as JavaScript's JSON.stringify does (no \u003c for <), so the
// page's message and the host's show a string alike.
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// formPayload builds the arguments a run form stands for: its "args" JSON object (the
// arguments it has no field for), then each filled field, a chosen secret as its
// "$secret:<name>" reference. An empty field is left out, for main's default.
func formPayload(r *http.Request, fn *functions.Function, fields []runField, declared []string) ([]byte, error) {
	extra := map[string]json.RawMessage{}
	if text := strings.TrimSpace(r.PostFormValue("args")); text != "" {
		raw, _, err := jobtype.DecodePayload([]byte(text))
		if err != nil {
			return nil, &badRequest{http.StatusBadRequest, "other arguments: " + err.Error()}
		}
		json.Unmarshal(raw, &extra)
	}
	type kv struct {
		k string
		v json.RawMessage
	}
	var args []kv
	for _, f := range fields {
		var v json.RawMessage
		if s := r.PostFormValue("secret." + f.Name); s != "" {
			if !slices.Contains(declared, s) {
				return nil, &badRequest{http.StatusBadRequest, fmt.Sprintf("argument %q: secret %q is not one function %q declares (secrets: or env:), so it would be refused; declared: %s",
					f.Name, s, fn.Name, strings.Join(declared, ", "))}
			}
			v = jsonString(secrets.RefPrefix + s)
		} else if text := r.PostFormValue("arg." + f.Name); text != "" {
			var err error
			if v, err = fieldValue(f.Param, text); err != nil {
				return nil, err
			}
		}
		if v != nil {
			delete(extra, f.Name)
			args = append(args, kv{f.Name, v})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		args = append(args, kv{k, extra[k]})
	}
	if err := missingRequired(fields, func(name string) bool {
		return slices.ContainsFunc(args, func(a kv) bool { return a.k == name })
	}); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(a.k))
		b.WriteByte(':')
		b.Write(a.v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// missingRequired refuses a form that leaves out a parameter main has no default for, in the
// words run.js shows at the field before anything is sent: run, the job would only fail.
func missingRequired(fields []runField, given func(string) bool) error {
	var missing []string
	for _, f := range fields {
		if !f.Optional && !given(f.Name) {
			missing = append(missing, fmt.Sprintf("argument %q is required (main has no default for it): fill it in", f.Name))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &badRequest{http.StatusBadRequest, strings.Join(missing, "; ")}
}

// readForm parses a run form's body within the bound: 413 over it, 400 when it is not a form.
func (d *Dashboard) readForm(w http.ResponseWriter, r *http.Request) error {
	limit := d.cfg.RunMaxBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return &badRequest{http.StatusRequestEntityTooLarge, fmt.Sprintf("form body over the %d-byte limit (serve --run-max-bytes, as POST /run); put large data in a volume and pass its name", limit)}
		}
		return &badRequest{http.StatusBadRequest, fmt.Sprintf("the form's body cannot be read: %v", err)}
	}
	return nil
}

// runFunction serves POST /functions/{name}/run: the run form, queued as POST /run queues a
// job (client.Invoke), after the check the host makes before a run (signature.Check), so that
// a value of the wrong type is refused now, in the host's words, not by a failed job.
func (d *Dashboard) runFunction(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := d.readForm(w, r); err != nil {
		d.runRefused(w, r, name, err)
		return
	}
	fn, err := d.localFunction(name)
	if err != nil {
		d.runRefused(w, r, name, err)
		return
	}
	var fields []runField
	var declared []string
	if fn.Spec != nil {
		fields, declared = runFields(fn), declaredSecrets(fn.Spec)
	}
	payload, err := formPayload(r, fn, fields, declared)
	if err != nil {
		d.runRefused(w, r, name, err)
		return
	}
	d.queue(ctx, c, w, r, fn, payload, "")
}

// rerunJob serves POST /jobs/{id}/rerun: a new job of the same function with the arguments
// the record kept, by the same way as the run form.
func (d *Dashboard) rerunJob(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rec, err := c.Jobs.Get(ctx, id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if !d.mayRunEach(w, r, func() ([]string, error) { return []string{rec.Function}, nil }) {
		return
	}
	args := rec.Args
	if args == nil && rec.ArgsBytes == 0 && rec.ArgsSHA256 == jobs.ArgsHash(nil) {
		args = json.RawMessage("{}") // an empty body, which a function reads as {}
	}
	if args == nil {
		d.runRefused(w, r, rec.Function, &badRequest{http.StatusConflict, fmt.Sprintf("job %s cannot be run again: %s", id, argsNotKept(rec))})
		return
	}
	fn, err := d.localFunction(rec.Function)
	if err != nil {
		d.runRefused(w, r, rec.Function, err)
		return
	}
	d.queue(ctx, c, w, r, fn, args, id)
}

// queue checks payload against fn's signature and queues it under a new id; the answer is the
// job's page (303), or {"job_id"} (202) for the page's script, which asked for JSON.
func (d *Dashboard) queue(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request, fn *functions.Function, payload []byte, rerunOf string) {
	raw, _, err := jobtype.DecodePayload(payload)
	if err == nil {
		err = fn.Signature.Check(raw)
	}
	if err != nil {
		d.runRefused(w, r, fn.Name, &badRequest{http.StatusBadRequest, err.Error()})
		return
	}
	id := ids.New()
	// Who runs it starts its flow: a host signs that (the dashboard holds no key, and asks one
	// on the hosts' connection it has).
	st := client.Start{By: "operator (dashboard without a login)", AskHost: true}
	if p, ok := webauth.PrincipalOf(r); ok {
		st = client.StartOf(p)
		st.AskHost = true
	}
	if err := c.InvokeAs(ctx, fn.Name, id, raw, st); err != nil {
		if errors.Is(err, client.ErrNotServed) {
			err = fmt.Errorf("%w: %w", errNoFunction, err)
		}
		d.runRefused(w, r, fn.Name, err)
		return
	}
	fields := []zap.Field{zap.String("function", fn.Name), zap.String("job_id", id), zap.String("by", who(r))}
	if rerunOf != "" {
		d.log.Info("dashboard: job run again", append(fields, zap.String("of", rerunOf))...)
	} else {
		d.log.Info("dashboard: job run from the form", fields...)
	}
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(map[string]string{"job_id": id})
		return
	}
	http.Redirect(w, r, "/jobs/"+id, http.StatusSeeOther)
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// runRefused answers a run that was not queued: its status and message, as JSON for the page's
// script and as text otherwise.
func (d *Dashboard) runRefused(w http.ResponseWriter, r *http.Request, function string, err error) {
	code := http.StatusInternalServerError
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		code = bad.code
	case errors.Is(err, errNoFunction):
		code = http.StatusNotFound
	}
	if code == http.StatusInternalServerError {
		d.log.Warn("dashboard: run failed", zap.String("function", function), zap.Error(err))
	} else {
		d.log.Info("dashboard: run refused", zap.String("function", function), zap.Int("status", code), zap.String("by", who(r)), zap.Error(err))
	}
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	http.Error(w, err.Error(), code)
}

// localFunction is name as this host's functions directory has it: what the run form is built
// from and checked against.
func (d *Dashboard) localFunction(name string) (*functions.Function, error) {
	if err := functions.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoFunction, err)
	}
	local, _ := d.localFunctions()
	fn := local[name]
	if fn == nil {
		return nil, fmt.Errorf("%w: function %q is not in this host's functions directory, so the dashboard cannot check its arguments; run it with `host invoke %s` or POST /run/%s", errNoFunction, name, name, name)
	}
	return fn, nil
}

// argsNotKept says why a record has no arguments.
func argsNotKept(rec *jobs.Record) string {
	switch {
	case rec.ArgsBytes > jobs.MaxArgsBytes:
		return fmt.Sprintf("its arguments (%d bytes) are over the %d bytes a record keeps", rec.ArgsBytes, jobs.MaxArgsBytes)
	case rec.ArgsBytes > 0:
		return "its arguments were not JSON, so they were not kept"
	}
	return "its record was written before records kept arguments"
}

// outcomeView is GET /jobs/{id}/outcome: what Run and wait shows once the job has ended.
type outcomeView struct {
	Status      string          `json:"status"`
	Result      json.RawMessage `json:"result,omitempty"`
	ResultBytes int             `json:"result_bytes,omitempty"`
	Error       string          `json:"error,omitempty"`
}

func (d *Dashboard) jobOutcome(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	rec, err := c.Jobs.Get(ctx, r.PathValue("id"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(outcomeView{Status: string(rec.Status), Result: rec.Result, ResultBytes: rec.ResultBytes, Error: rec.Error})
}

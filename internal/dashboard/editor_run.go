package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/scaffold"
	"github.com/agenthost/host/internal/webauth"
)

// testDraft serves POST /functions/{name}/test: the draft, checked first, run once in its jail
// with the run form's arguments by the host serving the dashboard, never deployed. The answer
// streams as JSON lines: {"log":{"stream","text"}} per output line as it comes, then
// {"status","result"|"error","run_time"}. The person leaving the page stops the run.
func (d *Dashboard) testDraft(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Drafts == nil {
		d.runRefused(w, r, r.PathValue("name"), &badRequest{http.StatusNotImplemented, "this dashboard is not served by a host, so it cannot test-run a draft: open the dashboard of `host serve`"})
		return
	}
	dr := d.loadRequest(w, r)
	if dr == nil {
		return
	}
	defer dr.remove()
	if dr.fn == nil {
		d.refuseProblems(w, r, "test run", dr)
		return
	}
	payload, err := formPayload(r, dr.fn, runFields(dr.fn), declaredSecrets(dr.fn.Spec))
	var raw json.RawMessage
	if err == nil {
		if raw, _, err = jobtype.DecodePayload(payload); err == nil {
			err = dr.fn.Signature.Check(raw)
		}
		if err != nil && !errors.As(err, new(*badRequest)) {
			err = &badRequest{http.StatusBadRequest, err.Error()}
		}
	}
	if err != nil {
		d.runRefused(w, r, dr.name, err)
		return
	}
	st := newLineStream(w)
	defer st.close()
	p := webauth.Principal(r)
	starter := ""
	if p.User {
		starter = p.Name
	}
	out, err := d.cfg.Drafts.RunDraft(r.Context(), dr.fn, raw, starter, st.line)
	end := map[string]any{}
	switch {
	case err != nil:
		end["status"], end["error"] = "not run", err.Error()
	case out.Err != nil:
		end["status"], end["error"] = string(jobtype.Failed), out.Err.Error()
	default:
		end["status"], end["result"] = string(jobtype.Succeeded), out.Result
	}
	if out != nil {
		end["run_time"] = roundDuration(out.Duration).String()
		end["served"] = out.Served
	}
	d.log.Info("dashboard: draft test-run", zap.String("function", dr.name), zap.Any("status", end["status"]), zap.String("by", who(r)))
	st.send(end)
}

// lineStream writes JSON lines to a response as a run's lines come, from any goroutine, and
// nothing once the handler is done with it.
type lineStream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	enc    *json.Encoder
	flush  func()
	closed bool
}

func newLineStream(w http.ResponseWriter) *lineStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	s := &lineStream{w: w, enc: json.NewEncoder(w), flush: func() {}}
	if f, ok := w.(http.Flusher); ok {
		s.flush = f.Flush
	}
	s.flush()
	return s
}

func (s *lineStream) line(stream string, text []byte) {
	s.send(map[string]any{"log": map[string]string{"stream": stream, "text": string(text)}})
}

func (s *lineStream) send(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.enc.Encode(v)
	s.flush()
}

func (s *lineStream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// deployDraft serves POST /functions/{name}/deploy: the draft, checked first, stored as a new
// deployment with the rest of the current one (serve --deployed), or written into the served
// directory, which the host reloads; message says why.
func (d *Dashboard) deployDraft(w http.ResponseWriter, r *http.Request) {
	dr := d.loadRequest(w, r)
	if dr == nil {
		return
	}
	defer dr.remove()
	if dr.fn == nil {
		d.refuseProblems(w, r, "deploy", dr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	msg := strings.TrimSpace(r.PostFormValue("message"))
	var said, target string
	var err error
	if d.cfg.Drafts != nil && d.cfg.Drafts.ServesDeployments() {
		var dep *deploy.Deployment
		if dep, said, err = d.storeDraft(ctx, r, dr, msg); err == nil {
			target = strconv.Itoa(dep.Number)
		}
	} else {
		target, said, err = d.writeDraft(dr)
	}
	if c, cerr := d.client(ctx); cerr == nil {
		d.audit(ctx, c, r, "deploy", dr.name, strings.TrimSpace(msg+" "+said), err)
	}
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, deploy.ErrRace), errors.Is(err, errExists):
			code = http.StatusConflict
		}
		d.log.Info("dashboard: draft not deployed", zap.String("function", dr.name), zap.String("by", who(r)), zap.Error(err))
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	d.log.Info("dashboard: draft deployed", zap.String("function", dr.name), zap.String("to", target), zap.String("by", who(r)))
	writeJSON(w, http.StatusOK, map[string]string{"said": said, "target": target})
}

// storeDraft stores the current deployment with the draft in place of its function (or added)
// as the next deployment; one stored meanwhile by someone else refuses it (deploy.ErrRace).
func (d *Dashboard) storeDraft(ctx context.Context, r *http.Request, dr *draft, msg string) (*deploy.Deployment, string, error) {
	js, err := jetstream.New(d.cfg.NC)
	if err != nil {
		return nil, "", fmt.Errorf("deploy %s: %w", dr.name, err)
	}
	st, err := deploy.Open(ctx, js, 0)
	if err != nil {
		return nil, "", err
	}
	fns := map[string]*functions.Function{}
	base := 0
	cur, err := st.Current(ctx)
	switch {
	case errors.Is(err, deploy.ErrNone):
	case err != nil:
		return nil, "", err
	default:
		base = cur.Number
		root, err := os.MkdirTemp("", "host-deployed-")
		if err != nil {
			return nil, "", fmt.Errorf("deploy %s: %w", dr.name, err)
		}
		defer os.RemoveAll(root)
		dir, err := st.Materialise(ctx, cur, root)
		if err != nil {
			return nil, "", err
		}
		fns, _ = functions.Load(dir)
	}
	fns[dr.name] = dr.fn
	dep, stored, err := st.Deploy(ctx, deploy.Request{Functions: fns, By: actor(r), Message: msg, Base: base})
	if err != nil {
		return nil, "", fmt.Errorf("deploy %s: %w", dr.name, err)
	}
	if !stored {
		return dep, fmt.Sprintf("unchanged: deployment %d already holds this version of %s; nothing was stored", dep.Number, dr.name), nil
	}
	return dep, fmt.Sprintf("deployment %d stored (%s); every serve --deployed host switches to it", dep.Number, strings.Join(dep.Changed, " ")), nil
}

// errExists is in the refusal of a new function whose name the served directory already has.
var errExists = errors.New("already exists")

// writeDraft writes the draft's entry into the served directory, atomically (a file beside it,
// renamed over it), where the host that watches the directory loads it.
func (d *Dashboard) writeDraft(dr *draft) (string, string, error) {
	dir := d.servedDir()
	if dir == "" {
		return "", "", errors.New("this dashboard serves no functions directory to write the draft into")
	}
	local, _ := d.localFunctions()
	var path string
	if fn := local[dr.name]; fn != nil {
		path = fn.Root
		if fn.Folder {
			path = filepath.Join(fn.Root, fn.Entry)
		}
	} else {
		if existing := scaffold.Existing(dir, dr.name); len(existing) > 0 {
			return "", "", fmt.Errorf("function %s %w (%s) but does not load: fix or remove it first", dr.name, errExists, strings.Join(existing, ", "))
		}
		path = filepath.Join(dir, dr.fn.Entry)
	}
	src := dr.fn.Root
	if dr.fn.Folder {
		src = filepath.Join(dr.fn.Root, dr.fn.Entry)
	}
	data, err := os.ReadFile(src)
	if err == nil {
		err = writeAtomic(path, data)
	}
	if err != nil {
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, fmt.Sprintf("written to %s: this host serves that directory (not deployments) and loads it within a second", path), nil
}

// writeAtomic writes data to a dot file beside path (which no loader reads) and renames it
// over path: the host never loads half a file. path's mode is kept, 0644 (0755 for .sh) when new.
func writeAtomic(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if filepath.Ext(path) == ".sh" {
		mode = 0o755
	}
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-draft-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

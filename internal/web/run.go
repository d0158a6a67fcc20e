package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/trace"
	"github.com/agenthost/host/internal/webauth"
)

const (
	// DefaultRunMaxBytes bounds a POST /run body when Config.RunMaxBytes is zero (serve
	// --run-max-bytes): the NATS server's default max_payload, which a payload must fit anyway.
	DefaultRunMaxBytes = 1 << 20
	// MaxRunWait is the longest ?wait= a POST /run may ask for: a request is a connection held
	// open, and a longer job is better followed by its id (`host logs -f`).
	MaxRunWait = 15 * time.Minute
)

// run serves POST /run/{name}: HTTP invoke for callers that do not speak NATS. The job is
// queued exactly as `host invoke` queues it (client.Invoke: a queued record, then a durable
// agent.run message), so it is the same job in every listing and survives the request.
type run struct {
	cfg Config

	c client.Lazy // opened on first use: the host's stores exist only once it started
}

func (rh *run) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := rh.cfg.Log
	name := r.PathValue("name")
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		runError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	id := r.Header.Get("Idempotency-Key")
	switch {
	case id == "":
		id = ids.New()
	case !ids.Safe.MatchString(id):
		// The key becomes the job id, as a caller's Nats-Msg-Id does, so it must be one.
		runError(w, http.StatusBadRequest, "", fmt.Sprintf("Idempotency-Key %q cannot be a job id: use 1 to 64 of A-Z a-z 0-9 _ -", abbreviate(id, 80)))
		return
	}
	payload, ok := rh.readArgs(w, r)
	if !ok {
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), rh.cfg.QueueTimeout)
	defer cancel()
	ctx = trace.Extract(ctx, r.Header) // a caller's traceparent: the job continues its trace
	if functions.CheckName(name) != nil || !rh.cfg.Engine.Serves(ctx, name) {
		runError(w, http.StatusNotFound, "", rh.unknown(ctx, name))
		return
	}
	if ref := rh.cfg.Engine.StoreRefusal(); ref != nil {
		// Refused before anything is written: no record without its trigger.
		storeRefused(w, log, name, ref.Reason)
		return
	}
	c, err := rh.c.Get(ctx)
	if err != nil {
		log.Error("HTTP invoke: cannot reach the job store", zap.String("function", name), zap.Error(err))
		runError(w, http.StatusServiceUnavailable, "", "the job store is not reachable; retry shortly")
		return
	}
	// A repeated key names the job already queued under it: never another function's, and
	// never one sent with other arguments, whose outcome ?wait would otherwise hand over.
	conflict := func(msg string) {
		log.Warn("HTTP invoke refused: its Idempotency-Key names another call", zap.String("function", name), zap.String("job_id", id),
			zap.String("by", webauth.Who(r)), zap.String("reason", msg))
		runError(w, http.StatusConflict, id, msg)
	}
	if rec, err := c.Jobs.Get(ctx, id); err == nil && rec.Function != name {
		conflict(jobs.TakenID(id, name, rec.Function).Error())
		return
	} else if err == nil && !rec.SameArgs(payload) {
		conflict(jobs.ReusedID(id, name).Error())
		return
	}
	var result *client.ResultWatch
	if wait > 0 {
		// Before the job is queued: a result too big for the job record is only published.
		if result, err = c.WatchResult(name, id); err != nil {
			runError(w, http.StatusServiceUnavailable, id, err.Error())
			return
		}
		defer result.Stop()
	}
	if err := c.InvokeAs(ctx, name, id, payload, startOf(r, rh.cfg.Sign)); err != nil {
		rh.notQueued(ctx, w, name, id, err, conflict)
		return
	}
	log.Info("HTTP invoke queued a job", zap.String("function", name), zap.String("job_id", id), zap.String("by", webauth.Who(r)), zap.Duration("wait", wait))
	w.Header().Set(bus.HeaderJobID, id)
	if wait == 0 {
		writeRunJSON(w, http.StatusAccepted, map[string]string{"job_id": id})
		return
	}
	rh.await(w, r, c, result, name, id, wait)
}

// startOf is who starts a job r queues, signed with the hosts' key: the principal the guard let
// r through as (a user is its flow's starter), or the operator of a face without a login.
func startOf(r *http.Request, sign func(parts ...string) string) client.Start {
	st := client.Start{By: "operator (web face without a login)"}
	if p, ok := webauth.PrincipalOf(r); ok {
		st = client.StartOf(p)
	}
	st.Sign = sign
	return st
}

// readArgs reads the request's body, a JSON object of arguments, as a job's payload; false when
// it is refused, the answer written.
func (rh *run) readArgs(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	maxBytes := rh.cfg.RunMaxBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			runError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("body over POST /run's %d-byte limit (serve --run-max-bytes); put large data in a volume and pass its name (a job's payload must also fit the NATS server's max_payload, 1 MiB by default)", maxBytes))
			return nil, false
		}
		if webauth.IsBodyTimeout(err) {
			w.Header().Set("Connection", "close")
			runError(w, http.StatusRequestTimeout, "", "the body did not arrive in time; send it at once")
			return nil, false
		}
		runError(w, http.StatusBadRequest, "", fmt.Sprintf("reading the body: %v", err))
		return nil, false
	}
	payload, _, err := jobtype.DecodePayload(body)
	if err != nil {
		runError(w, http.StatusBadRequest, "", "the body must be a JSON object of arguments: "+err.Error())
		return nil, false
	}
	return payload, true
}

// notQueued answers a call whose job c.Invoke did not queue, err saying why; conflict answers a
// key that names another call.
func (rh *run) notQueued(ctx context.Context, w http.ResponseWriter, name, id string, err error, conflict func(msg string)) {
	log := rh.cfg.Log
	if errors.Is(err, jobs.ErrIDTaken) || errors.Is(err, jobs.ErrIDReused) {
		// Another call under the key got in between ServeHTTP's check and the queue, or it
		// is held by a trigger queued without a record.
		conflict(err.Error())
		return
	}
	log.Error("HTTP invoke: job not queued", zap.String("function", name), zap.String("job_id", id), zap.Error(err))
	if errors.Is(err, client.ErrNotServed) {
		runError(w, http.StatusNotFound, "", rh.unknown(ctx, name))
		return
	}
	if errors.Is(err, client.ErrPayloadTooLarge) {
		runError(w, http.StatusRequestEntityTooLarge, "", err.Error())
		return
	}
	if bus.QueueFull(err) {
		w.Header().Set("Retry-After", "10")
		runError(w, http.StatusTooManyRequests, "", fmt.Sprintf("the job was not queued: the queue of %s is full (%v)", name, err))
		return
	}
	if reason, refused := bus.StoreRefused(err); refused {
		storeRefused(w, log, name, reason)
		return
	}
	if ref := rh.cfg.Engine.StoreRefusal(); ref != nil {
		storeRefused(w, log, name, ref.Reason)
		return
	}
	runError(w, http.StatusServiceUnavailable, id, "the job could not be queued; retry (with the same Idempotency-Key to be safe)")
}

// storeRefused answers 507 Insufficient Storage: JetStream's store refused the job, which is
// therefore not queued; the caller may send it again, with the same Idempotency-Key, later.
func storeRefused(w http.ResponseWriter, log *zap.Logger, name, reason string) {
	log.Warn("HTTP invoke refused: JetStream's store refuses writes", zap.String("function", name), zap.String("reason", reason))
	w.Header().Set("Retry-After", "30")
	runError(w, http.StatusInsufficientStorage, "", "the job was not queued: JetStream's store refuses writes ("+reason+"); "+bus.StoreRefusalAdvice+"; send it again then")
}

// await answers with the job's outcome, or 504 once wait has passed; the job goes on.
func (rh *run) await(w http.ResponseWriter, r *http.Request, c *client.Client, result *client.ResultWatch, name, id string, wait time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	rec, err := c.Jobs.WaitFinal(ctx, id)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller left; the job goes on
		}
		status := "queued"
		if cur, gerr := c.Jobs.Get(r.Context(), id); gerr == nil {
			status = string(cur.Status)
		}
		writeRunJSON(w, http.StatusGatewayTimeout, map[string]string{"job_id": id, "status": status,
			"error": fmt.Sprintf("job %s did not finish within %s; it goes on: follow it with `host logs -f %s`", id, wait, id)})
		return
	}
	w.Header().Set(bus.HeaderJobStatus, string(rec.Status))
	switch rec.Status {
	case jobtype.Succeeded:
		out := rec.Result
		if out == nil && rec.ResultBytes > 0 {
			if out, err = result.Result(ctx); err != nil {
				runError(w, http.StatusGatewayTimeout, id, fmt.Sprintf("job %s succeeded, but its %d-byte result (too large for the job record) was not heard: read it from %s", id, rec.ResultBytes, bus.ResultSubject(name)))
				return
			}
		}
		if out == nil {
			out = []byte("null")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(out)
	default: // failed or canceled: the error object, as on agent.error.<name>
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write(errorEvent(rec))
	}
}

// errorEvent is the error object a failed or canceled job published on agent.error.<name>,
// rebuilt from its record: the record's error was bounded by the engine when it was written.
func errorEvent(rec *jobs.Record) []byte {
	body, _ := json.Marshal(jobs.ErrorEvent{JobID: rec.ID, Function: rec.Function, FlowID: rec.FlowID, Error: rec.Error,
		Attempts: rec.Attempts, ExitCode: rec.ExitCode})
	return body
}

// unknown is the 404 message for a function no host serves, with the names that are served.
func (rh *run) unknown(ctx context.Context, name string) string {
	known := rh.cfg.Engine.ServedNames(ctx)
	hint := "no function is served at all: add one under the functions directory"
	if len(known) > 0 {
		hint = "served: " + strings.Join(known, ", ")
	}
	return fmt.Sprintf("no function named %q is served; %s (see `host functions`)", abbreviate(name, 80), hint)
}

func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("?wait=%s: want a duration such as 30s: %w", abbreviate(s, 40), err)
	case d <= 0 || d > MaxRunWait:
		return 0, fmt.Errorf("?wait=%s: want a duration above 0 and at most %s; for a longer job, take the job id and follow it with `host logs -f <id>`", s, MaxRunWait)
	}
	return d, nil
}

func runError(w http.ResponseWriter, status int, jobID, msg string) {
	body := map[string]string{"error": msg}
	if jobID != "" {
		body["job_id"] = jobID
	}
	writeRunJSON(w, status, body)
}

func writeRunJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

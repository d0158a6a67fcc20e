package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/sandbox"
)

// Stage is one part of a cold job's time.
type Stage struct {
	Name string
	P50  time.Duration
	Note string
}

// breakdown says where one cold default-network call (of noop-cold) spends its time. The host side
// comes from the marks every run records (runner.Marks, sandbox.Marks); NATS from the job
// records of calls (when the host took the job and finished it) against when the call was sent
// and answered. What happens inside the jail has no clock of the host's to read, so it is
// measured by difference: the jail started with `true`, then the init with `true`, then the
// init with `bash -c true`, then the job's own command, each from its go-ahead to its exit.
func breakdown(ctx context.Context, n int, h *benchHost, rig *jailRig) ([]Stage, error) {
	in, after, err := natsParts(ctx, n, h)
	if err != nil {
		return nil, err
	}
	own := rig.spec.Argv[rig.initArgv0:]
	variants := [][]string{{"true"}, {"true"}, {"bash", "-c", "true"}, own}
	if rig.initArgv0 > 0 {
		init := rig.spec.Argv[:rig.initArgv0]
		for i := 1; i < len(variants); i++ {
			variants[i] = append(slices.Clone(init), variants[i]...)
		}
	}
	inJail := make([][]time.Duration, len(variants))
	var runs []runner.Marks
	for range n {
		for i, argv := range variants {
			m, err := rig.startOnce(rig.withArgv(argv...), true)
			if err != nil {
				return nil, fmt.Errorf("jail with %q: %w", argv, err)
			}
			inJail[i] = append(inJail[i], m.Exited.Sub(m.Released))
		}
		out, marks := rig.run()
		if out.Err != nil {
			return nil, fmt.Errorf("run of noop: %w", out.Err)
		}
		runs = append(runs, marks)
	}
	host := func(d func(m runner.Marks) time.Duration) time.Duration {
		ds := make([]time.Duration, len(runs))
		for i, m := range runs {
			ds[i] = d(m)
		}
		return percentile(ds, 50)
	}
	jail := func(d func(m sandbox.Marks) time.Duration) time.Duration {
		return host(func(m runner.Marks) time.Duration { return d(m.Jail) })
	}
	med := func(i int) time.Duration { return percentile(inJail[i], 50) }
	return []Stage{
		{"NATS in", percentile(in, 50), "call sent → the host holds the job (JetStream store, delivery)"},
		{"job layout", host(func(m runner.Marks) time.Duration { return m.Laid.Sub(m.Start) }), "payload, secrets, job directory, command"},
		{"egress proxy socket", host(func(m runner.Marks) time.Duration { return m.Egress.Sub(m.Laid) }), "the job's own proxy socket, served"},
		{"cgroup", jail(func(m sandbox.Marks) time.Duration { return m.Cgroup.Sub(m.Entered) }), "the run's cgroup created, limits written"},
		{"seccomp", jail(func(m sandbox.Marks) time.Duration { return m.Seccomp.Sub(m.Cgroup) }), "the filter (compiled once per host) into its pipe"},
		{"bwrap fork+exec", jail(func(m sandbox.Marks) time.Duration { return m.Forked.Sub(m.Seccomp) }), "pipes, environment, bwrap started in the cgroup"},
		{"bwrap clones its init", jail(func(m sandbox.Marks) time.Duration { return m.Built.Sub(m.Forked) }), "until bwrap reports the jail's pid: user, pid, net... namespaces"},
		{"rlimits, proxy socket, go-ahead", jail(func(m sandbox.Marks) time.Duration { return m.Released.Sub(m.Built) }), "prlimit on the jail's init, the job's proxy socket made in the jail (when the host holds it), then the block fd"},
		proxySocket(host),
		{"mounts, `true`, exit", med(0), "go-ahead → bwrap exits, the jail running `true` without an init"},
		initStage(rig, med(1)-med(0)),
		{"  runtime start", med(2) - med(1), "`bash -c true` instead of `true`"},
		{"  shim and script", med(3) - med(2), fmt.Sprintf("%q instead of `bash -c true`", own)},
		{"jail teardown", jail(func(m sandbox.Marks) time.Duration { return gone(m).Sub(m.Exited) }), "until every process of the jail is gone (0: answered before it, on the runtime's end line)"},
		{"outputs", host(func(m runner.Marks) time.Duration { return m.Done.Sub(gone(m.Jail)) }), "result read and checked, volumes committed"},
		{"settle, reply", percentile(after, 50), "run over → the caller has its answer (record, ack, reply)"},
		{"runner total", host(func(m runner.Marks) time.Duration { return m.Done.Sub(m.Start) }), "one run of noop, start to finish, without NATS"},
	}, nil
}

// proxySocket is the part of a cold call's time the host spends making the job's proxy
// socket in its jail, when it does (sandbox.Listen).
func proxySocket(host func(func(runner.Marks) time.Duration) time.Duration) Stage {
	d := host(func(m runner.Marks) time.Duration {
		if m.Jail.Listened.IsZero() {
			return 0
		}
		return m.Jail.Listened.Sub(m.Jail.Built)
	})
	if d == 0 {
		return Stage{"  proxy socket in the jail", 0, "none: the jail init holds the proxy address (a host without CAP_SYS_ADMIN)"}
	}
	return Stage{"  proxy socket in the jail", d, "setns into the jail's network namespace, socket, bind, listen (rlimits included)"}
}

// initStage is the jail init's part, when the jail has one.
func initStage(rig *jailRig, d time.Duration) Stage {
	if rig.initArgv0 == 0 {
		return Stage{"  init", 0, "none: the host holds the job's proxy address in the jail, so nothing forwards inside it"}
	}
	return Stage{"  init", d, "jailinit listening, then running `true`"}
}

// natsParts calls noop-cold n times and returns, per call, the time from sending it to the host's
// start of the job, and from the host's end of the run to the answer.
func natsParts(ctx context.Context, n int, h *benchHost) (in, after []time.Duration, err error) {
	type call struct {
		id        string
		sent, got time.Time
	}
	calls := make([]call, 0, n)
	for range n {
		sent := time.Now()
		reply, err := callOnce(ctx, h.client, "noop-cold")
		if err != nil {
			return nil, nil, err
		}
		calls = append(calls, call{id: reply.Header.Get(bus.HeaderJobID), sent: sent, got: time.Now()})
	}
	store, err := h.jobs(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range calls {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		rec, err := store.WaitFinal(wctx, c.id)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("the record of call %s: %w", c.id, err)
		}
		in = append(in, rec.Started.Sub(c.sent))
		after = append(after, c.got.Sub(rec.Finished))
	}
	return in, after, nil
}

// gone is when the run stopped waiting for its jail: every process gone, or, for a run that
// answered on the runtime's end line, the end line (the teardown goes on after the answer).
func gone(m sandbox.Marks) time.Time {
	if m.Gone.IsZero() {
		return m.Exited
	}
	return m.Gone
}

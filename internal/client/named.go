package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/schedule"
)

// Named schedules (schedule.Named): added by name from `host schedules add` or the dashboard,
// each sending its own arguments to a function. Both faces check and store them here, so they
// refuse the same things in the same words.

// ErrBadSchedule is wrapped by the errors for a named schedule the user must correct (its name,
// function, schedule or arguments), as against a store that failed.
var ErrBadSchedule = errors.New("bad schedule")

// NamedSchedule is a named schedule as a user gives it: every field as typed.
type NamedSchedule struct {
	Name, Function, Schedule, Args string
}

// CheckNamed checks ns as AddNamedSchedule would store it: a name a key can hold, a function
// some host serves, a schedule: value that parses and fires, and arguments that are a JSON
// object. Every error wraps ErrBadSchedule and names the field.
func (c *Client) CheckNamed(ctx context.Context, ns NamedSchedule) (schedule.Named, error) {
	bad := func(err error) (schedule.Named, error) {
		return schedule.Named{}, fmt.Errorf("%w: %w", ErrBadSchedule, err)
	}
	if err := schedule.CheckNamedName(ns.Name); err != nil {
		return bad(err)
	}
	if err := functions.CheckName(ns.Function); err != nil {
		return bad(err)
	}
	expr := strings.TrimSpace(ns.Schedule)
	if err := annot.CheckSchedule(expr); err != nil {
		return bad(fmt.Errorf("schedule: %w", err))
	}
	args, err := schedule.CheckArgs(ns.Args)
	if err != nil {
		return bad(err)
	}
	served, err := c.servedFunctions(ctx)
	if err != nil {
		return schedule.Named{}, err
	}
	if !served[ns.Function] {
		return bad(fmt.Errorf("function %s: no host serves it; check the name (host functions lists them)", ns.Function))
	}
	return schedule.Named{Name: ns.Name, Function: ns.Function, Schedule: expr, Args: args}, nil
}

// AddNamedSchedule checks ns (CheckNamed) and stores it for every host; with replace it edits
// the schedule of that name (which must exist), otherwise a taken name is refused.
func (c *Client) AddNamedSchedule(ctx context.Context, ns NamedSchedule, replace bool, by string) (schedule.Named, bool, error) {
	n, err := c.CheckNamed(ctx, ns)
	if err != nil {
		return n, false, err
	}
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return n, false, err
	}
	if by == "" {
		by = CanceledBy()
	}
	n.AddedBy, n.Added = by, time.Now().UTC()
	replaced, err := st.AddNamed(ctx, n, replace)
	if errors.Is(err, schedule.ErrNamedExists) {
		err = fmt.Errorf("%w: %w", ErrBadSchedule, err)
	}
	return n, replaced, err
}

// NamedSchedules lists the named schedules, with their next tick (none when paused) and last.
func (c *Client) NamedSchedules(ctx context.Context) ([]schedule.Named, error) {
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return nil, err
	}
	return st.ListNamed(ctx, time.Now())
}

// NamedSchedule reads one named schedule.
func (c *Client) NamedSchedule(ctx context.Context, name string) (schedule.Named, error) {
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return schedule.Named{}, err
	}
	return st.GetNamed(ctx, name)
}

// RemoveNamedSchedule removes a named schedule from every host.
func (c *Client) RemoveNamedSchedule(ctx context.Context, name string) error {
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return err
	}
	return st.RemoveNamed(ctx, name)
}

// PauseNamedSchedule pauses (pause) or resumes a named schedule on every host; it reports
// whether that changed anything. by names who paused it; "" is this user at this machine.
func (c *Client) PauseNamedSchedule(ctx context.Context, name string, pause bool, by string) (bool, error) {
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return false, err
	}
	if by == "" {
		by = CanceledBy()
	}
	return st.PauseNamed(ctx, name, pause, by)
}

// servedFunctions are the functions some live host announces.
func (c *Client) servedFunctions(ctx context.Context) (map[string]bool, error) {
	board, err := presence.Bind(ctx, c.JS)
	if err != nil {
		return nil, err
	}
	entries, err := board.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the functions the hosts serve: %w", err)
	}
	served := map[string]bool{}
	for _, e := range entries {
		served[e.Function] = true
	}
	return served, nil
}

package client

import (
	"context"
	"fmt"
	"time"

	"github.com/agenthost/host/internal/presence"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/schedule"
)

// Schedules lists the schedules of the functions some host serves, with their next and last
// tick and whether they are paused.
func (c *Client) Schedules(ctx context.Context) ([]schedule.Entry, error) {
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return nil, err
	}
	served := map[string]bool{}
	if board, err := presence.Bind(ctx, c.JS); err == nil {
		if entries, err := board.List(ctx, ""); err == nil {
			for _, e := range entries {
				served[e.Function] = true
			}
		}
	}
	// A removed function's schedule stays recorded; it is listed again if a host serves it.
	return st.List(ctx, time.Now(), func(fn string) bool { return served[fn] })
}

// PauseSchedule makes every host skip function's ticks until ResumeSchedule, across restarts.
// by names who paused it, for the hosts' logs and the listing; "" is this user at this machine.
func (c *Client) PauseSchedule(ctx context.Context, function, by string) error {
	if err := checkScheduled(function); err != nil {
		return err
	}
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return err
	}
	if by == "" {
		by = CanceledBy()
	}
	return st.Pause(ctx, function, by)
}

// ResumeSchedule lets function's ticks fire again; it reports whether it was paused.
func (c *Client) ResumeSchedule(ctx context.Context, function string) (bool, error) {
	if err := checkScheduled(function); err != nil {
		return false, err
	}
	st, err := schedule.Bind(ctx, c.JS)
	if err != nil {
		return false, err
	}
	return st.Resume(ctx, function)
}

// checkScheduled refuses a name no function can have before it becomes part of a key: no such
// function has a schedule.
func checkScheduled(function string) error {
	if err := functions.CheckName(function); err != nil {
		return fmt.Errorf("%w: %w", schedule.ErrNoSchedule, err)
	}
	return nil
}

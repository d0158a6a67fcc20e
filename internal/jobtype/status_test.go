package jobtype

import (
	"context"
	"errors"
	"testing"
)

var all = []Status{None, Queued, Running, Waiting, Retrying, Succeeded, Failed, Canceled, Superseded}

// Every pair, so that a move added to or dropped from the table shows here.
func TestMoves(t *testing.T) {
	legal := map[[2]Status]bool{
		{None, Queued}: true, {None, Running}: true, {None, Failed}: true, {None, Retrying}: true, {None, Superseded}: true,
		{Queued, Running}: true, {Queued, Failed}: true, {Queued, Retrying}: true, {Queued, Canceled}: true, {Queued, Superseded}: true,
		{Running, Succeeded}: true, {Running, Failed}: true, {Running, Retrying}: true, {Running, Canceled}: true, {Running, Running}: true, {Running, Waiting}: true,
		{Waiting, Succeeded}: true, {Waiting, Failed}: true, {Waiting, Canceled}: true,
		{Retrying, Running}: true, {Retrying, Failed}: true, {Retrying, Retrying}: true, {Retrying, Canceled}: true, {Retrying, Superseded}: true,
	}
	for _, from := range all {
		for _, to := range all {
			err := from.To(to)
			if want := legal[[2]Status{from, to}]; (err == nil) != want {
				t.Errorf("%q → %q: legal = %v, want %v", from, to, err == nil, want)
			}
			if err != nil {
				var ill *IllegalMoveError
				if !errors.As(err, &ill) || ill.From != from || ill.To != to {
					t.Errorf("%q → %q: error %v is not an IllegalMoveError naming both", from, to, err)
				}
			}
		}
	}
}

func TestFinalStatusesGoNowhere(t *testing.T) {
	for _, s := range all {
		if s.Final() && len(moves[s]) > 0 {
			t.Errorf("final status %q has moves %v", s, moves[s])
		}
		if !s.Final() && s != None && len(moves[s]) == 0 {
			t.Errorf("status %q is not final but has no moves", s)
		}
	}
}

type runtimeError struct{}

func (runtimeError) Error() string  { return "bad argument" }
func (runtimeError) Terminal() bool { return true }

func TestErrorKinds(t *testing.T) {
	for _, c := range []struct {
		name                            string
		err                             error
		terminal, unavailable, canceled bool
	}{
		{"plain", errors.New("exit 1"), false, false, false},
		{"terminal", Terminal(errors.New("bad")), true, false, false},
		{"wrapped terminal", errors.Join(errors.New("x"), &TerminalError{Err: errors.New("bad")}), true, false, false},
		{"another package's", runtimeError{}, true, false, false},
		{"unavailable", &UnavailableError{Err: errors.New("store down")}, false, true, false},
		{"canceled", errors.Join(errors.New("stopped"), context.Canceled), false, false, true},
	} {
		if got := IsTerminal(c.err); got != c.terminal {
			t.Errorf("%s: IsTerminal = %v", c.name, got)
		}
		if got := IsUnavailable(c.err); got != c.unavailable {
			t.Errorf("%s: IsUnavailable = %v", c.name, got)
		}
		if got := IsCanceled(c.err); got != c.canceled {
			t.Errorf("%s: IsCanceled = %v", c.name, got)
		}
	}
	if Terminal(nil) != nil {
		t.Error("Terminal(nil) is not nil")
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
)

// loadWait bounds how long invoke waits for a host to load a function that the local functions
// directory has and no host serves yet: one just written (`host new` then `host invoke` at
// once), which a host serving that directory loads within a second or so of the last write.
const loadWait = 30 * time.Second

// invokeOrAwait queues the job as the CLI's operator; a function no host serves yet is waited
// for first when the local directory dir has it (awaitLoad): one written a moment ago (`host
// new`), whose reload the user caused.
func invokeOrAwait(ctx context.Context, c *client.Client, dir, name, id string, payload []byte) error {
	err := c.InvokeAs(ctx, name, id, payload, actorOf(c.NC).start())
	if errors.Is(err, client.ErrNotServed) {
		if err = awaitLoad(ctx, c, dir, name, err); err == nil {
			err = c.InvokeAs(ctx, name, id, payload, actorOf(c.NC).start())
		}
	}
	return err
}

// awaitLoad is invoke's answer to a function no host serves (notServed). A function the local
// directory dir has is waited for, up to loadWait, saying so on stderr; one the directory has
// but the hosts would refuse is refused at once with the reason. Any other name is notServed.
func awaitLoad(ctx context.Context, c *client.Client, dir, name string, notServed error) error {
	fns, errs := functions.Load(dir)
	fn := fns[name]
	if fn == nil {
		for _, err := range errs {
			var fe *functions.Error
			if errors.As(err, &fe) && strings.TrimSuffix(filepath.Base(fe.Path), filepath.Ext(fe.Path)) == name {
				return fmt.Errorf("%w: %s is refused, so no host will serve it: %v; fix it (`host check %s` shows the same)", notServed, fe.Path, err, dir)
			}
		}
		return notServed
	}
	fmt.Fprintf(os.Stderr, "function %s is in %s but no host serves it yet: if it was just written, a host serving %s loads it within a second or so; waiting up to %s…\n",
		name, fn.Root, dir, loadWait)
	wctx, cancel := context.WithTimeout(ctx, loadWait)
	defer cancel()
	if err := c.WaitServed(wctx, name); err != nil {
		return fmt.Errorf("%w: no host loaded %s within %s: is a `host serve` running on this NATS with --functions %s (under --deployed, `host deploy` it)? `host check %s` shows what a host would refuse",
			err, fn.Root, loadWait, dir, dir)
	}
	fmt.Fprintf(os.Stderr, "function %s is loaded; queuing the job\n", name)
	return nil
}

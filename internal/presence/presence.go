// Package presence says which hosts are alive and which function versions each serves. Two
// KeyValue buckets hold it:
//   - agent_hosts: one entry per live host, written every TTL/3 and expiring after TTL, so a
//     host that dies leaves within TTL (30 s by default);
//   - agent_functions: one entry per function a host serves, under <function>.<host>, written
//     when it starts serving it and again every few hours.
//
// A reader trusts a function entry only while its host's entry lives. That is what lets a host
// rewrite one key every ten seconds however many functions it serves: when each function entry
// carried its own 30 s TTL, 200 functions cost 20 fsynced writes a second, the largest part of
// an idle host's CPU.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
)

const (
	// FunctionsBucket holds what each host serves, under <function>.<host>.
	FunctionsBucket = "agent_functions"
	// HostsBucket holds one entry per live host.
	HostsBucket = "agent_hosts"
	// FunctionsTTL bounds how long the entries of a host that died stay in FunctionsBucket
	// (hidden meanwhile, their host being gone); a live host rewrites them every third of it.
	FunctionsTTL = 24 * time.Hour
)

// ErrNoHosts is what Bind answers when no host has ever announced itself on this NATS.
var ErrNoHosts = errors.New("no host has announced its functions: is `host serve` running against this NATS?")

// Announcement is what a host says, under <function>.<host> in agent_functions, about a
// function it serves; it withdraws it when it stops serving it. `host functions` lists them.
//
//	version      the content hash of the code it serves
//	host         the host
//	since        when it started serving this version
//	runtime      python, bun, bash or exec
//	subjects     the subjects its triggers come on
//	concurrency  its run slots on that host
//	deployment   the deployment it serves (serve --deployed), absent for a directory
//	refused      why its file is refused; with no version, the host serves none of it
type Announcement struct {
	Version     string    `json:"version"`
	Host        string    `json:"host"`
	Since       time.Time `json:"since"`
	Runtime     string    `json:"runtime,omitempty"`
	Subjects    []string  `json:"subjects,omitempty"`
	Concurrency int       `json:"concurrency,omitempty"`
	// Warm is how many warm jails the host keeps for the function; absent from hosts that
	// predate warm jails.
	Warm *int `json:"warm,omitempty"`
	// Deployment is the deployment the host serves (serve --deployed); 0 (absent) when it
	// serves a directory.
	Deployment int `json:"deployment,omitempty"`
	// Refused is why the host refuses the function's file (`host check`'s error, naming the
	// file and line): with a Version the host keeps serving its last good version, without
	// one it serves none.
	Refused string `json:"refused,omitempty"`
	// SwitchError is why the host could not switch to the current deployment (its packages do
	// not install, an object is corrupt): it keeps serving Deployment, and tries again.
	SwitchError string `json:"switch_error,omitempty"`
}

// Entry is one announcement with the function it names.
type Entry struct {
	Function string
	Announcement
}

// Board reads and writes the two buckets.
type Board struct {
	fns, hosts jetstream.KeyValue
}

// Open makes both buckets, or updates them to these settings: ttl is how long a host that
// stops writing stays alive. Every host on one NATS should use the same. replicas is as
// bus.Replicas takes it (0: keep what the buckets have).
func Open(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (*Board, error) {
	fns, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: FunctionsBucket, Description: "which code version each host serves (trusted while the host's agent_hosts entry lives)",
		History: 1, TTL: FunctionsTTL, Replicas: bus.Replicas(ctx, js, "KV_"+FunctionsBucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open function versions bucket %s: %w", FunctionsBucket, err)
	}
	hosts, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: HostsBucket, Description: "the live hosts (each entry expires unless its host rewrites it)",
		History: 1, TTL: ttl, Replicas: bus.Replicas(ctx, js, "KV_"+HostsBucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open live hosts bucket %s: %w", HostsBucket, err)
	}
	return &Board{fns: fns, hosts: hosts}, nil
}

// Bind reads the buckets the hosts made; ErrNoHosts when there are none yet.
func Bind(ctx context.Context, js jetstream.JetStream) (*Board, error) {
	fns, err := js.KeyValue(ctx, FunctionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s not found: %w", FunctionsBucket, ErrNoHosts)
	}
	if err != nil {
		return nil, fmt.Errorf("read served functions: %w", err)
	}
	hosts, err := js.KeyValue(ctx, HostsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s not found (hosts older than it announce nothing it can trust): %w", HostsBucket, ErrNoHosts)
	}
	if err != nil {
		return nil, fmt.Errorf("read live hosts: %w", err)
	}
	return &Board{fns: fns, hosts: hosts}, nil
}

// Key is the key of host's entry for function. Host ids keep only what a key token may hold.
func Key(function, host string) string { return function + "." + hostToken(host) }

func hostToken(host string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '=', r == '-':
			return r
		}
		return '_'
	}, host)
}

// Alive says host is alive until the hosts' TTL passes.
func (b *Board) Alive(ctx context.Context, host string) error {
	if _, err := b.hosts.Put(ctx, hostToken(host), []byte(host)); err != nil {
		return fmt.Errorf("say host %s is alive: %w", host, err)
	}
	return nil
}

// Leave says host is gone at once.
func (b *Board) Leave(ctx context.Context, host string) error {
	if err := b.hosts.Delete(ctx, hostToken(host)); err != nil {
		return fmt.Errorf("say host %s left: %w", host, err)
	}
	return nil
}

// Announce writes a's entry for function.
func (b *Board) Announce(ctx context.Context, function string, a Announcement) error {
	v, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode the announcement of %s: %w", function, err)
	}
	if _, err := b.fns.Put(ctx, Key(function, a.Host), v); err != nil {
		return fmt.Errorf("announce %s on %s: %w", function, a.Host, err)
	}
	return nil
}

// Withdraw deletes host's entry for function.
func (b *Board) Withdraw(ctx context.Context, function, host string) error {
	if err := b.fns.Delete(ctx, Key(function, host)); err != nil {
		return fmt.Errorf("withdraw %s on %s: %w", function, host, err)
	}
	return nil
}

// live lists the hosts alive now, by key token.
func (b *Board) live(ctx context.Context) (map[string]bool, error) {
	lister, err := b.hosts.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list live hosts: %w", err)
	}
	alive := map[string]bool{}
	for k := range lister.Keys() {
		alive[k] = true
	}
	return alive, nil
}

// List returns the entries of live hosts, for function or for every function when it is "".
// An entry this version cannot read is left out: it says nothing it could show.
func (b *Board) List(ctx context.Context, function string) ([]Entry, error) {
	alive, err := b.live(ctx)
	if err != nil || len(alive) == 0 {
		return nil, err
	}
	var w jetstream.KeyWatcher
	if function == "" {
		w, err = b.fns.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		w, err = b.fns.Watch(ctx, function+".*", jetstream.IgnoreDeletes())
	}
	if err != nil {
		return nil, fmt.Errorf("read served functions: %w", err)
	}
	defer w.Stop()
	var out []Entry
	for e := range w.Updates() {
		if e == nil { // every current entry read
			break
		}
		fn, host, _ := strings.Cut(e.Key(), ".") // function names have no dot
		if !alive[host] {
			continue
		}
		var a Announcement
		if json.Unmarshal(e.Value(), &a) != nil {
			continue
		}
		out = append(out, Entry{Function: fn, Announcement: a})
	}
	return out, nil
}

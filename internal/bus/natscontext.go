package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Context is the part of a NATS CLI context (`nats context save`) the host's commands use.
type Context struct {
	Name     string `json:"-"`
	URL      string `json:"url"`
	Creds    string `json:"creds,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// natsConfigDir is where the NATS CLI keeps its contexts.
func natsConfigDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// LoadContext reads the NATS CLI context called name, or the selected one (`nats context
// select`) when name is empty. With no name and no selected context it returns nil, nil.
func LoadContext(name string) (*Context, error) {
	dir, err := natsConfigDir()
	if err != nil {
		return nil, fmt.Errorf("find the NATS CLI's contexts: %w", err)
	}
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the selected NATS context: %w", err)
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return nil, nil
		}
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("NATS context name %q is not valid", name)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read NATS context %q (%s): %w; list contexts with `nats context ls`", name, path, err)
	}
	c := &Context{Name: name}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("parse NATS context %s: %w", path, err)
	}
	return c, nil
}

// Context names `host serve --nats-auth` writes: the hosts user (for the host's CLI) and the
// callers user (for applications, or `nats --context host-callers req agent.call.<fn> ...`).
const (
	HostsContext   = "host"
	CallersContext = "host-callers"
)

// SaveContext writes a NATS CLI context readable by its owner only (it holds a password), and
// selects it when no context is selected yet, so the host's CLI and a stock `nats` CLI use it
// without flags. It reports whether it selected it.
func SaveContext(c Context, selectIfNone bool) (selected bool, err error) {
	dir, err := natsConfigDir()
	if err != nil {
		return false, fmt.Errorf("find the NATS CLI's contexts: %w", err)
	}
	if err := writePrivate(filepath.Join(dir, "context", c.Name+".json"), c); err != nil {
		return false, fmt.Errorf("write NATS context %q: %w", c.Name, err)
	}
	if !selectIfNone {
		return false, nil
	}
	cur, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	if err == nil && strings.TrimSpace(string(cur)) != "" {
		return false, nil
	}
	if err := os.WriteFile(filepath.Join(dir, "context.txt"), []byte(c.Name+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("select NATS context %q: %w", c.Name, err)
	}
	return true, nil
}

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
	Name  string `json:"-"`
	URL   string `json:"url"`
	Creds string `json:"creds"`
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

package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxKeyFile bounds what LoadKey reads: a key file is 32 raw bytes or 64 hex
// digits and a newline.
const maxKeyFile = 1024

// LoadKey reads the 32-byte host key from path: either exactly 32 raw bytes,
// or 64 hex digits (surrounding whitespace allowed). The file must be a
// regular file with mode 0600 or stricter: a key readable by its group or by
// everyone is refused.
//
// When the file does not exist and create is true, LoadKey generates a key
// with crypto/rand and writes it as hex with mode 0600 (creating the parent
// directory with mode 0700 if needed). Concurrent creators agree on one key:
// the file appears atomically and is never overwritten.
//
// The caller chooses path, and it must not be under the host's data directory
// (the JetStream store, the package cache, ...): the point of the host key is
// that a copy of the data (a backup, a stolen disk image, a volume snapshot)
// does not decrypt without it. Keep it on another volume, in a secrets manager
// mount, or at least outside every directory that is backed up with the data.
// Losing the key loses every secret encrypted with it.
func LoadKey(path string, create bool) ([]byte, error) {
	if path == "" {
		return nil, errors.New("secrets: no host key path given")
	}
	key, err := readKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !create {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("host key %s does not exist: start the host once to create it, or write 32 random bytes as hex there with mode 0600: %w", path, err)
		}
		return key, err
	}
	if err := createKey(path); err != nil {
		return nil, err
	}
	return readKey(path)
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open host key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("host key %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("host key %s has mode %04o, so other users may read it: it must be 0600 or stricter (chmod 600 %s), and since it may have leaked, consider rotating it", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read host key %s: %w", path, err)
	}
	if len(b) == KeySize {
		return b, nil
	}
	if len(b) <= maxKeyFile {
		t := bytes.TrimSpace(b)
		if len(t) == 2*KeySize {
			key := make([]byte, KeySize)
			if _, err := hex.Decode(key, t); err == nil {
				return key, nil
			}
		}
	}
	return nil, fmt.Errorf("host key %s is not a key: it must hold exactly %d raw bytes or %d hex digits", path, KeySize, 2*KeySize)
}

func createKey(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create host key directory: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("generate host key: %w", err)
	}
	text := make([]byte, 2*KeySize+1)
	hex.Encode(text, key)
	text[len(text)-1] = '\n'
	clear(key)

	// Write a temporary file and hard-link it into place: the key appears
	// whole or not at all, and a key created meanwhile by another process
	// is kept (Link fails on an existing name, Rename would replace it).
	tmp, err := os.CreateTemp(dir, ".hostkey-*") // mode 0600
	if err != nil {
		return fmt.Errorf("create host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(text)
	clear(text)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write host key %s: %w", path, werr)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create host key %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the new name durable; best effort
		d.Close()
	}
	return nil
}

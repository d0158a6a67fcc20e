package objstore

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// cache is the host's local copy of blobs (and manifests, which are content-addressed too),
// kept under CacheDir/blobs/<sha256hex> and bounded by evicting the least recently used.
// Blobs are shared by all volumes: equal content is cached once. Several processes may share
// the directory: each keeps its own index, and a file another evicted is simply a miss.
type cache struct {
	dir   string
	limit int64
	log   *zap.Logger
	gauge prometheus.Gauge

	mu    sync.Mutex
	lru   *list.List               // of *cacheItem; front = most recently used
	items map[string]*list.Element // by hash
	size  int64
}

type cacheItem struct {
	hash string
	size int64
}

// staleTemp is how old a temporary file must be before a starting host deletes it: younger
// ones may belong to another process sharing the directory.
const staleTemp = time.Hour

func openCache(dir string, limit int64, log *zap.Logger, gauge prometheus.Gauge) (*cache, error) {
	c := &cache{dir: filepath.Join(dir, "blobs"), limit: limit, log: log, gauge: gauge,
		lru: list.New(), items: map[string]*list.Element{}}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create volume cache directory %s: %w (check --volume-cache-dir and its permissions)", c.dir, err)
	}
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("read volume cache directory %s: %w", c.dir, err)
	}
	type seed struct {
		hash  string
		size  int64
		mtime time.Time
	}
	var seeds []seed
	for _, de := range des {
		info, err := de.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if strings.HasPrefix(de.Name(), ".tmp-") {
			if time.Since(info.ModTime()) > staleTemp {
				os.Remove(filepath.Join(c.dir, de.Name()))
			}
			continue
		}
		if !validHash(de.Name()) {
			continue
		}
		seeds = append(seeds, seed{de.Name(), info.Size(), info.ModTime()})
	}
	// Use times survive restarts as mtimes (touch sets them), so the LRU order does too.
	slices.SortFunc(seeds, func(a, b seed) int { return a.mtime.Compare(b.mtime) })
	for _, s := range seeds {
		c.items[s.hash] = c.lru.PushFront(&cacheItem{s.hash, s.size})
		c.size += s.size
	}
	c.evict()
	return c, nil
}

func (c *cache) path(hash string) string { return filepath.Join(c.dir, hash) }

// open returns the cached blob positioned at its start, or nil when it is not cached.
func (c *cache) open(hash string) *os.File {
	f, err := os.Open(c.path(hash))
	if err != nil {
		c.forget(hash)
		return nil
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil
	}
	c.touch(hash, info.Size())
	return f
}

func (c *cache) touch(hash string, size int64) {
	c.mu.Lock()
	if el, ok := c.items[hash]; ok {
		it := el.Value.(*cacheItem)
		c.size += size - it.size
		it.size = size
		c.lru.MoveToFront(el)
	} else {
		c.items[hash] = c.lru.PushFront(&cacheItem{hash, size})
		c.size += size
	}
	c.mu.Unlock()
	now := time.Now()
	_ = os.Chtimes(c.path(hash), now, now) // only orders eviction after a restart
}

// forget drops hash from the index when its file has gone (another process evicted it).
func (c *cache) forget(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[hash]; ok {
		c.size -= el.Value.(*cacheItem).size
		c.lru.Remove(el)
		delete(c.items, hash)
	}
}

// drop deletes a cached blob whose content turned out not to match its name.
func (c *cache) drop(hash string) {
	c.forget(hash)
	os.Remove(c.path(hash))
}

// hashMismatchError says that content did not hash to the name it was stored under.
type hashMismatchError struct{ want, got string }

func (e *hashMismatchError) Error() string {
	return fmt.Sprintf("content hashes to sha256 %s, expected %s", e.got, e.want)
}

// put stores r, which must hash to hash, and returns the cached file open at its start. The
// content goes to a temporary file renamed into place, so no reader ever sees part of a blob.
func (c *cache) put(hash string, r io.Reader) (*os.File, int64, error) {
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return nil, 0, fmt.Errorf("create a file in the volume cache %s: %w", c.dir, err)
	}
	fail := func(err error) (*os.File, int64, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		return fail(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hash {
		return fail(&hashMismatchError{want: hash, got: got})
	}
	if err := os.Rename(tmp.Name(), c.path(hash)); err != nil {
		return fail(fmt.Errorf("move a blob into the volume cache %s: %w", c.dir, err))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return nil, 0, err
	}
	c.touch(hash, n)
	return tmp, n, nil
}

// evict deletes the least recently used blobs until the cache fits its limit. Open files of
// evicted blobs stay readable, so a sync in progress is not disturbed.
func (c *cache) evict() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.size > c.limit && c.lru.Len() > 0 {
		el := c.lru.Back()
		it := el.Value.(*cacheItem)
		if err := os.Remove(c.path(it.hash)); err != nil && !os.IsNotExist(err) {
			c.log.Warn("cannot evict a blob from the volume cache", zap.String("blob", it.hash), zap.Error(err))
		}
		c.lru.Remove(el)
		delete(c.items, it.hash)
		c.size -= it.size
	}
	if c.gauge != nil {
		c.gauge.Set(float64(c.size))
	}
}

func validHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

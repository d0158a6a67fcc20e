package host

import (
	"fmt"
	"testing"
)

// The pinned-version cache keeps at most maxPinnedVersions, dropping the least recently used.
func TestPinnedVersionsAreBounded(t *testing.T) {
	var p pinned
	for i := range maxPinnedVersions {
		p.keep(fmt.Sprint(i), &served{})
	}
	if p.version("0") == nil { // used now: the least recently used is 1
		t.Fatal("version 0 is not cached")
	}
	p.keep("new", &served{})
	if len(p.versions) != maxPinnedVersions {
		t.Fatalf("%d versions cached, want the bound %d", len(p.versions), maxPinnedVersions)
	}
	if p.version("1") != nil || p.version("0") == nil || p.version("new") == nil {
		t.Fatal("the cache dropped another than the least recently used version")
	}
	for _, c := range []struct{ dir, name, hash string }{{"my-fn-abc123", "my-fn", "abc123"}, {".tmp-x-1", "", ""}, {"nohash", "", ""}} {
		name, hash, ok := cutVersionDir(c.dir)
		if name != c.name || hash != c.hash || ok != (c.name != "") {
			t.Fatalf("cutVersionDir(%q) = %q %q %t", c.dir, name, hash, ok)
		}
	}
}

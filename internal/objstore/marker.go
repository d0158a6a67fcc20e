package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Head markers: each version a commit makes leaves one small object in the store beside its
// data, so that the store alone says which versions of which volumes were committed (see the
// package doc for why it is written where it is). They live under one prefix of their own, not
// under the volume's, so that a single listing of markersRoot finds every volume and its
// versions without touching a blob; the key names the volume, the version (zero-padded, so keys
// sort by version) and the manifest's hash, so two runs that raced for the same version (one
// of which lost its lease) leave two keys, never one overwritten.
const markersRoot = "heads/"

func markerPrefix(name string) string { return markersRoot + name + "/" }

func markerKey(name string, r versionRec) string {
	return fmt.Sprintf("%s%020d-%s.json", markerPrefix(name), r.Version, r.Manifest)
}

// marker is what a head marker holds: the volume's head as the commit that wrote it was about
// to make it, so that recovering a volume is reading its newest marker.
type marker struct {
	Volume   string       `json:"volume"`
	Version  uint64       `json:"version"`
	Versions []versionRec `json:"versions"` // oldest first, as in the head
}

// markerRef is a marker key taken apart.
type markerRef struct {
	key      string
	name     string
	version  uint64
	manifest string
}

// parseMarkerKey takes a key under markersRoot apart; ok is false for anything this package
// did not write (a stray object is reported, never trusted).
func parseMarkerKey(key string) (markerRef, bool) {
	rest, ok := strings.CutPrefix(key, markersRoot)
	if !ok {
		return markerRef{}, false
	}
	name, file, ok := strings.Cut(rest, "/")
	if !ok || checkName(name) != nil {
		return markerRef{}, false
	}
	file, ok = strings.CutSuffix(file, ".json")
	if !ok {
		return markerRef{}, false
	}
	num, hash, ok := strings.Cut(file, "-")
	if !ok || len(num) != 20 || !validHash(hash) {
		return markerRef{}, false
	}
	version, err := strconv.ParseUint(num, 10, 64)
	if err != nil || version == 0 {
		return markerRef{}, false
	}
	return markerRef{key: key, name: name, version: version, manifest: hash}, true
}

// writeMarker stores the marker of the head nh is about to become.
func (v *Volumes) writeMarker(ctx context.Context, name string, nh *head) (string, error) {
	r, ok := nh.current()
	if !ok {
		return "", fmt.Errorf("write head marker of volume %s: the new head names version %d, which its history lacks", name, nh.Version)
	}
	data, err := json.Marshal(marker{Volume: name, Version: nh.Version, Versions: nh.Versions})
	if err != nil {
		return "", fmt.Errorf("encode head marker of volume %s: %w", name, err)
	}
	key := markerKey(name, r)
	err = v.storeCall(ctx, "write head marker", key, func() error {
		return v.b.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	})
	return key, err
}

// dropMarker deletes the marker of a commit that did not happen, so that a store read alone
// does not offer it as the head. Best effort: one left behind (this host died first) is
// outranked by the next commit's marker and swept with the rest of a failed commit's objects.
func (v *Volumes) dropMarker(ctx context.Context, name, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.opts.RetryFor)
	defer cancel()
	if err := v.storeCall(ctx, "delete head marker", key, func() error { return v.b.Delete(ctx, key) }); err != nil {
		v.log.Warn("cannot delete the head marker of a commit that did not happen; the next commit sweeps it",
			zap.String("volume", name), zap.String("key", key), zap.Error(err))
	}
}

// check verifies that a marker read from the store is one this package could have written for
// ref: it comes from outside this process and is about to become a head.
func (mk *marker) check(ref markerRef) error {
	if mk.Volume != ref.name {
		return fmt.Errorf("it names volume %q", mk.Volume)
	}
	if mk.Version != ref.version {
		return fmt.Errorf("it names version %d", mk.Version)
	}
	h := head{Version: mk.Version, Versions: mk.Versions}
	r, ok := h.current()
	if !ok {
		return fmt.Errorf("its history lacks version %d", mk.Version)
	}
	if r.Manifest != ref.manifest {
		return fmt.Errorf("its version %d has manifest %s", mk.Version, r.Manifest)
	}
	for i, r := range mk.Versions {
		if !validHash(r.Manifest) {
			return fmt.Errorf("version %d has a bad manifest hash %q", r.Version, r.Manifest)
		}
		if i > 0 && r.Version <= mk.Versions[i-1].Version {
			return fmt.Errorf("its history is not in version order at version %d", r.Version)
		}
	}
	return nil
}

package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
)

// PutRawVersion makes a manifest with arbitrary entries the volume's only version, without
// any of the checks a commit makes, to test what Mount does with a crafted manifest.
func PutRawVersion(ctx context.Context, v *Volumes, name string, entries []map[string]any) error {
	data, err := json.Marshal(map[string]any{"volume": name, "version": 1, "entries": entries})
	if err != nil {
		return err
	}
	rec := versionRec{Version: 1, Time: time.Now().UTC(), JobID: "crafted", Manifest: sha256hex(data)}
	if err := v.b.Put(ctx, manifestKey(name, rec), bytes.NewReader(data), int64(len(data))); err != nil {
		return err
	}
	_, err = v.writeHead(ctx, name, &head{Version: 1, Versions: []versionRec{rec}}, 0)
	return err
}

// StagedCount is the head's count of staged versions.
func StagedCount(ctx context.Context, v *Volumes, name string) int {
	h, _, err := v.readHead(ctx, name)
	if err != nil || h == nil {
		return -1
	}
	return h.Staged
}

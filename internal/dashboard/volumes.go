package dashboard

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/objstore"
)

// errNoVolumes answers the volume pages of a dashboard built without a volume store.
var errNoVolumes = errors.New("this host has no volume store configured")

type volumesView struct {
	session // who the page is shown to
	Volumes []objstore.VolumeInfo
	Err     string
}

func (d *Dashboard) volumesPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v := &volumesView{}
	var err error = errNoVolumes
	if d.cfg.Volumes != nil {
		v.Volumes, err = d.cfg.Volumes.Infos(ctx)
	}
	if err != nil {
		v.Err = err.Error()
	}
	d.render(w, r, "volumes", v)
}

// withVolumes serves a request on the volume store, bounded by requestContext; 404 when the
// host has none.
func (d *Dashboard) withVolumes(serve func(ctx context.Context, vols *objstore.Volumes, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d.cfg.Volumes == nil {
			d.serveError(w, r, http.StatusNotFound, errNoVolumes.Error())
			return
		}
		ctx, cancel := requestContext(r)
		defer cancel()
		serve(ctx, d.cfg.Volumes, w, r)
	}
}

// volumeView is one volume: its kept versions, and the files of one of them.
type volumeView struct {
	session  // who the page is shown to
	Name     string
	Version  uint64 // the version whose files are listed
	Versions []objstore.VersionInfo
	Files    []objstore.FileInfo
}

// version reads the ?version= or version form field; 0 (the latest) when absent.
func version(r *http.Request) (uint64, error) {
	s := r.FormValue("version")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("version %q: want a version number from the volume's history", s)
	}
	return n, nil
}

func (d *Dashboard) volumePage(ctx context.Context, vols *objstore.Volumes, w http.ResponseWriter, r *http.Request) {
	want, err := version(r)
	if err != nil {
		d.serveError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	v := &volumeView{Name: r.PathValue("name")}
	if v.Versions, err = vols.History(ctx, v.Name); err == nil {
		v.Version, v.Files, err = vols.Files(ctx, v.Name, want)
	}
	if err != nil {
		d.serveError(w, r, http.StatusNotFound, fmt.Sprintf("volume %s: %v (list volumes at /volumes)", v.Name, err))
		return
	}
	d.render(w, r, "volume", v)
}

// volumeFile downloads one file of a version, as `host volumes get <name> <path>`. It is
// always an attachment of an opaque type, so a file a job wrote never renders as a page here.
func (d *Dashboard) volumeFile(ctx context.Context, vols *objstore.Volumes, w http.ResponseWriter, r *http.Request) {
	want, err := version(r)
	if err != nil {
		d.serveError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	name, file := r.PathValue("name"), r.FormValue("path")
	if file == "" {
		d.serveError(w, r, http.StatusBadRequest, "say which file with ?path=")
		return
	}
	_, files, err := vols.Files(ctx, name, want)
	if err != nil {
		d.serveError(w, r, http.StatusNotFound, fmt.Sprintf("volume %s: %v", name, err))
		return
	}
	found := false
	for _, f := range files {
		found = found || (f.Path == file && f.Type == "file")
	}
	if !found {
		d.serveError(w, r, http.StatusNotFound, fmt.Sprintf("volume %s has no file %q in that version", name, file))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(file)}))
	if err := vols.Get(ctx, name, want, file, w); err != nil {
		d.log.Warn("dashboard: download a volume file", zap.String("volume", name), zap.String("path", file), zap.Error(err))
	}
}

// restoreVolume makes a new version equal to an old one, as `host volumes restore`.
func (d *Dashboard) restoreVolume(ctx context.Context, vols *objstore.Volumes, w http.ResponseWriter, r *http.Request) {
	old, err := version(r)
	if err != nil || old == 0 {
		d.serveError(w, r, http.StatusBadRequest, "say which version to restore in the version field")
		return
	}
	name := r.PathValue("name")
	n, err := vols.Restore(ctx, name, old, "dashboard-"+ids.New())
	if c, cerr := d.client(ctx); cerr == nil {
		d.audit(ctx, c, r, "volume.restore", name, fmt.Sprintf("version %d made equal to version %d", n, old), err)
	}
	if err != nil {
		d.fail(w, r, fmt.Errorf("restore volume %s to version %d: %w", name, old, err))
		return
	}
	d.log.Info("dashboard: volume restored", zap.String("volume", name), zap.Uint64("from", old), zap.Uint64("version", n), zap.String("by", who(r)))
	http.Redirect(w, r, "/volumes/"+name, http.StatusSeeOther)
}

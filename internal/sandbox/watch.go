package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A fork bomb that keeps retrying its refused forks would run until its timeout: a run ends
// as soon as its cgroup counts a fork refused for the pids limit. Every run of the host is
// watched by one watcher, so that jails that wait (warm ones, for minutes or hours) cost the
// host next to nothing while they wait:
//   - cgroup v2 notifies a change of pids.events (inotify IN_MODIFY): one goroutine blocked on
//     one inotify descriptor serves every run;
//   - cgroup v1 does not (since Linux 6.12 it notifies a file v1 does not have), nor does a v2
//     host out of inotify watches: those runs are read on one shared ticker, each through a
//     descriptor kept open. Reading every run every tick would cost a host with hundreds of
//     waiting jails a few percent of a core, so a tick reads the runs under a parent group
//     only when the parent's pids.current (which counts every run below it) moved since the
//     last tick: a fork bomb moves it on its way to the limit, and its refusal follows at
//     once. A refusal after the count stood still (a run sitting at its limit that forks
//     later) is found by the sweep of every run each pidsSweep.
//
// The sweep is the backstop, not the detector: a bomb is caught by its parent's count moving,
// within pidsPoll. At 2 s the sweep alone cost 200 idle warm jails ~0.7% of a core (perf, v1),
// most of the host's idle budget, for a case (a run parked at its limit) that only delays
// its own end. The limit itself is the kernel's and holds at once; the watcher only ends the
// run early, so a quarter of a second is soon enough, and ticking at 10 Hz was a tenth of
// what an idle host spent.

const (
	// pidsPoll is how often the parents of the polled runs are read, and the runs under a
	// parent whose count moved.
	pidsPoll = 250 * time.Millisecond
	// pidsSweep is how often every polled run is read, moved or not.
	pidsSweep = 10 * time.Second
)

// pidsWatch is one run's watch: breach is closed once a fork was refused for the pids limit.
type pidsWatch struct {
	w      *breachWatcher
	path   string // the run's pids.events
	key    string // the count in it: "max"
	gate   string // polled: the file whose change says path may have changed; "" for none
	breach chan struct{}

	// Guarded by w.mu.
	fired, stopped bool
	wd             int      // inotify watch descriptor, -1 when polled
	f              *os.File // polled: pids.events, open for pread
}

// breachWatcher watches every run of the process.
type breachWatcher struct {
	mu        sync.Mutex
	inotify   *os.File // nil until first needed, and where inotify is unavailable
	noInotify bool     // inotify failed: every watch is polled
	byWd      map[int]*pidsWatch
	polled    map[string]map[*pidsWatch]struct{} // by gate
	npolled   int
	ticking   bool // the poll goroutine runs
}

var breaches = newBreachWatcher()

func newBreachWatcher() *breachWatcher {
	return &breachWatcher{byWd: map[int]*pidsWatch{}, polled: map[string]map[*pidsWatch]struct{}{}}
}

// watchPids watches g's pids accounting until stop: notified on v2, polled on v1.
func watchPids(g *runGroup) *pidsWatch {
	return breaches.watch(filepath.Join(g.pidsDir, "pids.events"), "max",
		filepath.Join(filepath.Dir(g.pidsDir), "pids.current"), g.version == CgroupV2)
}

// watch watches key in the flat-keyed file path until the watch is stopped, and closes the
// watch's breach once key counts above 0. notified says the kernel notifies a change of the
// file; otherwise it is polled, each tick that gate (if not "") changed and at each sweep.
func (b *breachWatcher) watch(path, key, gate string, notified bool) *pidsWatch {
	w := &pidsWatch{w: b, path: path, key: key, gate: gate, breach: make(chan struct{}), wd: -1}
	b.mu.Lock()
	defer b.mu.Unlock()
	if notified && b.addInotify(w) {
		// A breach before the watch existed notified nobody.
		b.check(w, readKeyed(path, key))
		return w
	}
	b.addPolled(w)
	return w
}

// addPolled puts w on the shared ticker, starting it if it is not running. b.mu is held.
func (b *breachWatcher) addPolled(w *pidsWatch) {
	f, err := os.Open(w.path)
	if err != nil {
		// No accounting to read (the group is gone already): nothing to breach.
		return
	}
	w.f = f
	if b.polled[w.gate] == nil {
		b.polled[w.gate] = map[*pidsWatch]struct{}{}
	}
	b.polled[w.gate][w] = struct{}{}
	b.npolled++
	if !b.ticking {
		b.ticking = true
		go b.poll()
	}
}

// addInotify adds an inotify watch for w, starting the reader on first use; false when
// inotify cannot watch it (no inotify, or the host is out of watches). b.mu is held.
func (b *breachWatcher) addInotify(w *pidsWatch) bool {
	if b.inotify == nil && !b.noInotify {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			b.noInotify = true
			return false
		}
		// Non-blocking, so that the runtime's poller, not a thread, waits on it.
		b.inotify = os.NewFile(uintptr(fd), "inotify")
		go b.read(b.inotify)
	}
	if b.inotify == nil {
		return false
	}
	wd, err := unix.InotifyAddWatch(int(b.inotify.Fd()), w.path, unix.IN_MODIFY)
	if err != nil {
		return false
	}
	w.wd = wd
	b.byWd[wd] = w
	return true
}

// read serves the inotify descriptor for the life of the process. Should reading fail, its
// watches go to the ticker: a run must not lose its watch to the watcher's trouble.
func (b *breachWatcher) read(f *os.File) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.inotify, b.noInotify = nil, true
			for wd, w := range b.byWd {
				delete(b.byWd, wd)
				w.wd = -1
				b.addPolled(w)
			}
			f.Close()
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_MODIFY == 0 {
				continue // IN_IGNORED: the watch or its group was removed
			}
			b.mu.Lock()
			if w := b.byWd[int(ev.Wd)]; w != nil {
				b.check(w, readKeyed(w.path, w.key))
			}
			b.mu.Unlock()
		}
	}
}

// poll reads the polled watches on one ticker, and ends when there are none left. A tick
// that finds no gate moved reads only the gates: a few reads, however many runs wait.
func (b *breachWatcher) poll() {
	t := time.NewTicker(pidsPoll)
	defer t.Stop()
	buf := make([]byte, 512)
	gates := map[string]*gate{}
	var paths []string
	var ps []polledWatch
	lastSweep := time.Now()
	for now := range t.C {
		b.mu.Lock()
		if b.npolled == 0 {
			b.ticking = false
			b.mu.Unlock()
			for _, g := range gates {
				g.close()
			}
			return
		}
		paths = paths[:0]
		for path := range b.polled {
			paths = append(paths, path)
		}
		b.mu.Unlock()

		moved := readGates(gates, paths)
		sweep := now.Sub(lastSweep) >= pidsSweep
		if sweep {
			lastSweep = now
		}
		ps = ps[:0]
		b.mu.Lock()
		for path, ws := range b.polled {
			if !sweep && !moved[path] {
				continue
			}
			for w := range ws {
				ps = append(ps, polledWatch{w, w.f})
			}
		}
		b.mu.Unlock()
		for _, p := range ps {
			// Outside the lock, so that runs start and stop meanwhile: a stop closes p.f,
			// and the read then fails. At offset 0 the kernel renders the file afresh.
			n, _ := p.f.ReadAt(buf, 0)
			if n == 0 {
				continue
			}
			if count := keyedValue(string(buf[:n]), p.w.key); count > 0 {
				b.mu.Lock()
				b.check(p.w, count)
				b.mu.Unlock()
			}
		}
	}
}

// polledWatch is a polled watch and its descriptor, as a tick found them.
type polledWatch struct {
	w *pidsWatch
	f *os.File
}

// gate is a file the poll rereads each tick: a parent group's pids.current.
type gate struct {
	f    *os.File // nil when it cannot be read: its runs are read every tick
	last string
}

func (g *gate) close() {
	if g.f != nil {
		g.f.Close()
	}
}

// readGates rereads the gates at paths and returns those that moved since the last tick,
// are new, or cannot be read ("", no gate, always moves); gates not among paths are closed.
func readGates(gates map[string]*gate, paths []string) map[string]bool {
	moved := make(map[string]bool, len(paths))
	for _, path := range paths {
		g := gates[path]
		if g == nil {
			g = &gate{}
			if path != "" {
				g.f, _ = os.Open(path)
			}
			gates[path] = g
			moved[path] = true // its runs have not been read yet
		}
		var buf [32]byte
		n := 0
		if g.f != nil {
			n, _ = g.f.ReadAt(buf[:], 0)
		}
		if now := string(buf[:n]); n == 0 || now != g.last {
			moved[path], g.last = true, now
		}
	}
	for path, g := range gates {
		if !slices.Contains(paths, path) {
			g.close()
			delete(gates, path)
		}
	}
	return moved
}

// check fires w if count is above 0. b.mu is held.
func (b *breachWatcher) check(w *pidsWatch, count uint64) {
	if count == 0 || w.fired || w.stopped {
		return
	}
	w.fired = true
	close(w.breach)
	b.forget(w)
}

// forget drops w from the watcher. b.mu is held.
func (b *breachWatcher) forget(w *pidsWatch) {
	if w.wd >= 0 && b.inotify != nil {
		delete(b.byWd, w.wd)
		// Fails once the group is removed, which removed the watch with it.
		_, _ = unix.InotifyRmWatch(int(b.inotify.Fd()), uint32(w.wd))
		w.wd = -1
	}
	if w.f != nil {
		delete(b.polled[w.gate], w)
		if len(b.polled[w.gate]) == 0 {
			delete(b.polled, w.gate)
		}
		b.npolled--
		w.f.Close()
		w.f = nil
	}
}

// breached is closed once the run's pids limit refused a fork; nil (never) without a watch.
func (w *pidsWatch) breached() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.breach
}

// stop ends the watch; the run's group may go after it.
func (w *pidsWatch) stop() {
	if w == nil {
		return
	}
	w.w.mu.Lock()
	defer w.w.mu.Unlock()
	w.stopped = true
	w.w.forget(w)
}

package sandbox

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// jailInit tracks the jail's init process through a pidfd, which, unlike a
// pid, cannot come to name another process.
type jailInit struct {
	info  io.ReadCloser
	known chan struct{} // closed once fd is set or known to be unavailable

	mu     sync.Mutex
	fd     int // pidfd, -1 if none
	pid    int // in the host's pid namespace, once known
	closed bool
}

func newJailInit(info io.ReadCloser) *jailInit {
	return &jailInit{info: info, known: make(chan struct{}), fd: -1}
}

// watch reads the init's pid in the background.
func (j *jailInit) watch() { j.readPid() }

// readPid reads the init's pid from bwrap's info fd and opens a pidfd for
// it. It returns 0 when bwrap died before building the jail.
func (j *jailInit) readPid() int {
	defer close(j.known)
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(j.info).Decode(&info); err != nil || info.ChildPid <= 0 {
		return 0 // bwrap died before building the jail: nothing inside to wait for
	}
	// The init cannot have been reaped and its pid reused yet in any
	// realistic schedule: bwrap writes the info right after creating it.
	fd, err := unix.PidfdOpen(info.ChildPid, 0)
	if err != nil {
		return 0 // already gone
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		unix.Close(fd)
		return 0
	}
	j.fd = fd
	j.pid = info.ChildPid
	return info.ChildPid
}

func (j *jailInit) kill() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fd >= 0 {
		_ = unix.PidfdSendSignal(j.fd, unix.SIGKILL, nil, 0)
	}
}

// wait blocks until the init has exited. The kernel reaps every other
// process of a pid namespace before its init finishes exiting, so then the
// whole jail is gone.
func (j *jailInit) wait(bound time.Duration) {
	deadline := time.Now().Add(bound)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-j.known:
	case <-timer.C:
		return
	}
	j.mu.Lock()
	fd := j.fd
	j.mu.Unlock()
	if fd < 0 {
		return
	}
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return
		}
		// A pidfd polls readable once its process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n > 0 {
			return
		}
	}
}

// release closes the pidfd and unblocks a watch still reading the info fd.
func (j *jailInit) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.fd >= 0 {
		unix.Close(j.fd)
		j.fd = -1
	}
	j.info.Close()
}

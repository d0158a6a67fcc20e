package app

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkJailReach makes sure the jail's user can pass through every directory down to dir: bwrap
// binds job directories, snapshots and packages from under --data as that user, and a data
// directory inside a private one (/root/..., a mktemp -d) would otherwise let the host start
// and then fail every jailed job with "Can't find source path".
func checkJailReach(dir string, uid, gid int) error {
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("check that the jail can reach %s: %w", dir, err)
		}
		if !canSearch(st, uid, gid) {
			return fmt.Errorf("the jail's user (uid %d, gid %d) cannot reach the data directory %s: %s has mode %04o and is not its to enter; "+
				"allow passing through with `chmod o+x %s` (it lists nothing) or start serve with another --data, e.g. /var/lib/host",
				uid, gid, dir, p, st.Mode().Perm(), p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// canSearch applies the kernel's owner, group, other order to the search (x) bit.
func canSearch(st os.FileInfo, uid, gid int) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true // not a Linux file system we can reason about; bwrap will say
	}
	perm := st.Mode().Perm()
	switch {
	case int(sys.Uid) == uid:
		return perm&0o100 != 0
	case int(sys.Gid) == gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

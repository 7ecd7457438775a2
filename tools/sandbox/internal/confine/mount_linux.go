package confine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ReadOnly are the attributes of every Tree a command may only read.
const ReadOnly = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// CloneTree takes path (relative to dirfd; "" for dirfd itself) with the
// mounts below it as a detached mount with attributes set.
func CloneTree(dirfd int, path string, set uint64) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_RECURSIVE)
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, path, flags)
	if err != nil {
		return -1, fmt.Errorf("take %s: %w", path, err)
	}
	if set != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: set}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("set attributes of %s: %w", path, err)
		}
	}
	return fd, nil
}

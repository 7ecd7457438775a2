package tools

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openRoot opens dir, whose path must hold no symbolic link, as an
// os.Root: the directory opened is the one at that path now, not where a
// link swapped in since it was checked would lead.
func openRoot(dir string) (*os.Root, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("%s (a symbolic link in its path is refused): %w", dir, err)
	}
	defer unix.Close(fd)
	return os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", fd))
}

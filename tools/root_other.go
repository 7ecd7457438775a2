//go:build !linux

package tools

import "os"

// openRoot opens dir as an os.Root.
func openRoot(dir string) (*os.Root, error) { return os.OpenRoot(dir) }

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
)

// Backup writes a consistent copy of the database at path to dst, a file
// that must not exist yet, while the database's owner may be serving it:
// a read-only connection copies one snapshot (VACUUM INTO), so the copy
// holds every entry committed before it began and no half of a later
// commit, and the owner's writes go on meanwhile. The copy is checked
// (integrity_check) before Backup returns; a fresh agentd opens it, or
// Restore puts it in place of a database.
func Backup(ctx context.Context, path, dst string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("backup %s: %s exists; give a new file to write the copy to", path, dst)
	}
	src, err := readOnly(abs)
	if err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	defer src.Close()
	if err := checkReadable(ctx, src); err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if _, err := src.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		os.Remove(dst)
		return fmt.Errorf("backup %s to %s: %w", path, dst, err)
	}
	copied, err := readOnly(dst)
	if err != nil {
		return fmt.Errorf("backup %s: the copy %s: %w", path, dst, err)
	}
	defer copied.Close()
	if err := integrity(ctx, copied); err != nil {
		return fmt.Errorf("backup %s: the copy %s: %w", path, dst, err)
	}
	return nil
}

// Restore puts the backup at src in place of the database at path. It
// takes the owner's lock first, so it refuses while an agentd serves path
// (ErrLocked naming it), checks that src is a sound agentd database this
// build can read, and replaces path by a rename after removing its -wal
// and -shm files, so nothing of the replaced database is replayed onto
// the backup. src is left as it is.
func Restore(ctx context.Context, src, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("restore to %s: %w", path, err)
	}
	owner, err := lockOwner(path, abs)
	if err != nil {
		return err
	}
	defer owner.release()
	db, err := readOnly(src)
	if err != nil {
		return fmt.Errorf("restore %s: %w", src, err)
	}
	err = checkReadable(ctx, db)
	if err == nil {
		err = integrity(ctx, db)
	}
	db.Close()
	if err != nil {
		return fmt.Errorf("restore %s: %w", src, err)
	}
	tmp := abs + ".restoring"
	if err := copyFile(src, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore %s: %w", src, err)
	}
	for _, f := range []string{abs + "-wal", abs + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			os.Remove(tmp)
			return fmt.Errorf("restore to %s: %w", path, err)
		}
	}
	if err := os.Rename(tmp, abs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore to %s: %w", path, err)
	}
	return syncDir(filepath.Dir(abs))
}

// readOnly opens a database file read-only with SQLite's normal locking,
// as any outside reader does.
func readOnly(abs string) (*sql.DB, error) {
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: "mode=ro&_busy_timeout=5000"}
	db := sql.OpenDB(connector{dsn: u.String()})
	db.SetMaxOpenConns(1)
	return db, nil
}

// checkReadable refuses a file that is not an agentd database or whose
// schema is newer than this build.
func checkReadable(ctx context.Context, db *sql.DB) error {
	var app, version int
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if app != applicationID {
		return fmt.Errorf("not an agentd database (application_id %#x)", app)
	}
	if version > SchemaVersion() {
		return fmt.Errorf("schema version %d is newer than this agentd supports (%d)", version, SchemaVersion())
	}
	return nil
}

func integrity(ctx context.Context, db *sql.DB) error {
	var result string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check(1)").Scan(&result); err != nil {
		return err
	}
	if result != "ok" {
		return fmt.Errorf("integrity check failed: %s", result)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

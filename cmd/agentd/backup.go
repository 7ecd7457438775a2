package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/persistence/sqlite"
)

// backup runs "agentd backup --db FILE --to OUT" (a consistent copy while
// the owning agentd serves FILE) and "agentd restore --from BACKUP --db
// FILE" (a copy put in place of FILE while no agentd serves it).
func backup(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", orDefault(getenv("AGENTD_DB"), "./agentd.db"), "the SQLite database (env AGENTD_DB)")
	to := fs.String("to", "", "backup: the new file to write the copy to")
	from := fs.String("from", "", "restore: the backup to put in place of --db")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: agentd backup [--db FILE] --to OUT      copy the database, also while agentd serves it\n"+
			"       agentd restore --from BACKUP [--db FILE]  put a backup in place of the database (agentd stopped)\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%s takes flags only, got %q", cmd, fs.Arg(0))
	}
	if daemon.EngineOf(*db) == daemon.Postgres {
		return errors.New("--db names a PostgreSQL database: back it up with pg_dump (or your provider's snapshots), restore with pg_restore")
	}
	switch cmd {
	case "backup":
		if *to == "" {
			fs.Usage()
			return errors.New("backup needs --to OUT, a file that does not exist yet")
		}
		if err := sqlite.Backup(ctx, *db, *to); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "backed up %s to %s\n", *db, *to)
	default:
		if *from == "" {
			fs.Usage()
			return errors.New("restore needs --from BACKUP")
		}
		if err := sqlite.Restore(ctx, *from, *db); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restored %s from %s\n", *db, *from)
	}
	return nil
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/agentd/agentd/clients/go/sessionfile"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// transfer runs "agentd export" and "agentd import": clients of a running
// agentd (the database has one owner at a time) that write and read a
// session as a file of length-delimited agentd.v1.SessionRecord messages.
func transfer(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", orDefault(getenv("AGENTD_LISTEN"), "127.0.0.1:7777"), "the address of the running agentd (host:port or unix:///path)")
	token := fs.String("auth-token", getenv("AGENTD_AUTH_TOKEN"), "the token agentd was started with, if any")
	out := fs.String("o", "", "export: write to this file instead of standard output")
	format := fs.String("format", "agentd", `export: "agentd" (length-delimited SessionRecords) or "pi" (pi's session file, JSON lines); import reads either`)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: agentd export [--addr A] [--format agentd|pi] [-o FILE] SESSION_ID\n       agentd import [--addr A] FILE\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%s takes one argument, got %d", cmd, fs.NArg())
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := agentdv1.NewAgentServiceClient(conn)
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	if cmd == "export" {
		w := stdout
		if *out != "" {
			f, err := os.Create(*out)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		bw := bufio.NewWriter(w)
		if *format != string(sessionfile.Agentd) && *format != string(sessionfile.Pi) {
			return fmt.Errorf(`--format %q: use "agentd" or "pi"`, *format)
		}
		if err := sessionfile.Export(ctx, client, fs.Arg(0), sessionfile.Format(*format), bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	sess, err := sessionfile.Import(ctx, client, f)
	if err != nil {
		return fmt.Errorf("import %s: %w", fs.Arg(0), err)
	}
	fmt.Fprintln(stdout, sess.GetId())
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

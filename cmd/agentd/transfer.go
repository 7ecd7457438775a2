package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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
		switch *format {
		case "agentd":
			if err := exportSession(ctx, client, fs.Arg(0), bw); err != nil {
				return err
			}
		case "pi":
			recs, err := exportRecords(ctx, client, fs.Arg(0))
			if err != nil {
				return err
			}
			if err := writePi(bw, recs); err != nil {
				return err
			}
		default:
			return fmt.Errorf(`--format %q: use "agentd" or "pi"`, *format)
		}
		return bw.Flush()
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	next := delimitedRecords(r)
	if first, err := r.Peek(1); err == nil && first[0] == '{' {
		// A pi session file (JSON lines) rather than length-delimited
		// protobuf, which never starts with '{' (a header record starts
		// with its size, then field 1's tag 0x0a).
		recs, err := piRecords(r)
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		next = func() (*agentdv1.SessionRecord, error) {
			if len(recs) == 0 {
				return nil, io.EOF
			}
			rec := recs[0]
			recs = recs[1:]
			return rec, nil
		}
	}
	sess, err := importSession(ctx, client, next)
	if err != nil {
		return err
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

// exportRecords reads every record of ExportSession.
func exportRecords(ctx context.Context, client agentdv1.AgentServiceClient, sessionID string) ([]*agentdv1.SessionRecord, error) {
	stream, err := client.ExportSession(ctx, &agentdv1.ExportSessionRequest{SessionId: sessionID})
	if err != nil {
		return nil, err
	}
	var recs []*agentdv1.SessionRecord
	for {
		rec, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
}

// exportSession writes each record of ExportSession as its size (a varint)
// and its deterministic encoding, so the same session gives the same bytes.
func exportSession(ctx context.Context, client agentdv1.AgentServiceClient, sessionID string, w io.Writer) error {
	stream, err := client.ExportSession(ctx, &agentdv1.ExportSessionRequest{SessionId: sessionID})
	if err != nil {
		return err
	}
	var buf []byte
	for {
		rec, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
		if err != nil {
			return err
		}
		buf = protowire.AppendVarint(buf[:0], uint64(len(body)))
		if _, err := w.Write(append(buf, body...)); err != nil {
			return err
		}
	}
}

// delimitedRecords reads length-delimited SessionRecords.
func delimitedRecords(r *bufio.Reader) func() (*agentdv1.SessionRecord, error) {
	i := 0
	return func() (*agentdv1.SessionRecord, error) {
		rec := &agentdv1.SessionRecord{}
		err := protodelim.UnmarshalOptions{MaxSize: -1}.UnmarshalFrom(r, rec)
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("record %d of the file: %w", i, err)
		}
		i++
		return rec, nil
	}
}

// importSession sends records to ImportSession.
func importSession(ctx context.Context, client agentdv1.AgentServiceClient, next func() (*agentdv1.SessionRecord, error)) (*agentdv1.Session, error) {
	stream, err := client.ImportSession(ctx)
	if err != nil {
		return nil, err
	}
	for {
		rec, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&agentdv1.ImportSessionRequest{Record: rec}); err != nil {
			break // the server refused: CloseAndRecv says why
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetSession(), nil
}

package sessionfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Format names a session file format.
type Format string

// The formats.
const (
	// Agentd is length-delimited SessionRecords (each message preceded by
	// its size as a varint), deterministically encoded, so the same
	// session always gives the same bytes.
	Agentd Format = "agentd"
	// Pi is pi's session file: JSON lines, version 3.
	Pi Format = "pi"
)

// Export writes a session of a running agentd to w in the given format.
func Export(ctx context.Context, client agentdv1.AgentServiceClient, sessionID string, format Format, w io.Writer) error {
	stream, err := client.ExportSession(ctx, &agentdv1.ExportSessionRequest{SessionId: sessionID})
	if err != nil {
		return err
	}
	var recs []*agentdv1.SessionRecord
	for {
		rec, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if format == Pi {
			recs = append(recs, rec)
			continue
		}
		if err := WriteRecord(w, rec); err != nil {
			return err
		}
	}
	if format == Pi {
		return WritePi(w, recs)
	}
	return nil
}

// WriteRecord writes one record as its size and its deterministic
// encoding.
func WriteRecord(w io.Writer, rec *agentdv1.SessionRecord) error {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = w.Write(append(protowire.AppendVarint(nil, uint64(len(body))), body...))
	return err
}

// Import creates a session in a running agentd from a file in either
// format (told apart by its first byte: pi's JSON lines start with '{',
// a record starts with its size) and returns it.
func Import(ctx context.Context, client agentdv1.AgentServiceClient, r io.Reader) (*agentdv1.Session, error) {
	br := bufio.NewReader(r)
	next := records(br)
	if first, err := br.Peek(1); err == nil && first[0] == '{' {
		recs, err := ReadPi(br)
		if err != nil {
			return nil, err
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

// records reads length-delimited SessionRecords.
func records(r *bufio.Reader) func() (*agentdv1.SessionRecord, error) {
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

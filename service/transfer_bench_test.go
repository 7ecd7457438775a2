package service_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// BenchmarkExportImport exports a 10,000-entry session over gRPC and
// imports the records into a new session, and reports each direction in
// entries per second, and GetTree of the session against GetTranscript of
// it (every page of both).
func BenchmarkExportImport(b *testing.B) {
	const n = 10000
	h := newHarness(b, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{})
	var msgs []*agentdv1.AgentMessage
	for i := range n {
		msgs = append(msgs, &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts(fmt.Sprintf("message %d of a long session", i))}}})
		if len(msgs) == 1000 {
			if _, err := h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: id, Messages: msgs}); err != nil {
				b.Fatal(err)
			}
			msgs = nil
		}
	}
	var export, imp, tree, transcript time.Duration
	for b.Loop() {
		start := time.Now()
		stream, err := h.client.ExportSession(h.ctx(), &agentdv1.ExportSessionRequest{SessionId: id})
		if err != nil {
			b.Fatal(err)
		}
		var recs []*agentdv1.SessionRecord
		for {
			rec, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, rec)
		}
		mid := time.Now()
		up, err := h.client.ImportSession(h.ctx())
		if err != nil {
			b.Fatal(err)
		}
		for _, rec := range recs {
			if err := up.Send(&agentdv1.ImportSessionRequest{Record: rec}); err != nil {
				b.Fatal(err)
			}
		}
		resp, err := up.CloseAndRecv()
		if err != nil || len(recs) != n+1 {
			b.Fatalf("import: %v, %d records", err, len(recs))
		}
		end := time.Now()
		export += mid.Sub(start)
		imp += end.Sub(mid)
		if _, err := h.client.DeleteSession(h.ctx(), &agentdv1.DeleteSessionRequest{SessionId: resp.GetSession().GetId()}); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		nodes, token := 0, ""
		for {
			page, err := h.client.GetTree(h.ctx(), &agentdv1.GetTreeRequest{SessionId: id, PageSize: 1000, PageToken: token})
			if err != nil {
				b.Fatal(err)
			}
			nodes += len(page.GetNodes())
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		if nodes != n {
			b.Fatalf("tree has %d nodes", nodes)
		}
		mid = time.Now()
		token = ""
		for {
			page, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id, PageSize: 1000, PageToken: token})
			if err != nil {
				b.Fatal(err)
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		tree += mid.Sub(start)
		transcript += time.Since(mid)
	}
	b.ReportMetric(float64(n)*float64(b.N)/export.Seconds(), "exported-entries/s")
	b.ReportMetric(float64(n)*float64(b.N)/imp.Seconds(), "imported-entries/s")
	b.ReportMetric(float64(tree.Microseconds())/float64(b.N)/1e3, "ms/GetTree")
	b.ReportMetric(float64(transcript.Microseconds())/float64(b.N)/1e3, "ms/GetTranscript")
	b.ReportMetric(float64(tree)/float64(transcript), "x-GetTranscript")
}

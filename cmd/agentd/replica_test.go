package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
)

// The tests in this file run several agentd processes, the replicas, on
// one PostgreSQL database (pgtest.DSN: skipped without a server, except in
// CI).

// testLease is the replicas' lease: short, so expiry is seen quickly.
const testLease = 2 * time.Second

// startReplicas starts n agentd processes on one new database.
func startReplicas(t *testing.T, n int) (dsn string, ps []*proc) {
	t.Helper()
	dsn = pgtest.DSN(t)
	for i := range n {
		ps = append(ps, startProc(t, dsn, "--replica-id", fmt.Sprintf("replica-%d", i), "--lease", testLease.String(), "--metrics-listen", "127.0.0.1:0"))
	}
	return dsn, ps
}

// clientToolConfig is a session whose first answer calls the client tool
// "pick", so its run waits for SubmitToolResult, and whose next answers
// are "done" and "stopped".
func clientToolConfig(approval agentdv1.ApprovalPolicy) *agentdv1.SessionConfig {
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	args, _ := structpb.NewStruct(map[string]any{})
	call := &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{
		ToolCall: &agentdv1.ToolCall{Id: "call-1", Name: "pick", Arguments: args}}}}}
	return &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "pick", Description: "pick one", Parameters: params,
			Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT, Approval: approval}},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{call, {Content: texts("done")}, {Content: texts("stopped")}}},
	}
}

// startWaiting prompts the session on c (detached) and returns the run id
// once the event want (tool_call_requested or approval_requested) arrived.
func startWaiting(t *testing.T, c agentdv1.AgentServiceClient, id string, want func(*agentdv1.AgentEvent) bool) (string, agentdv1.AgentService_PromptClient) {
	t.Helper()
	stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("pick one"), Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("session %s: stream ended before the wait: %v", id, err)
		}
		if want(ev) {
			return ev.GetRunId(), stream
		}
	}
}

func isToolCallRequested(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil }
func isApprovalRequested(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil }

// checkRun checks a run's events: seq 1, 2, ... of one run, ending with
// one agent_end; the events of the repair of an interrupted run may skip
// seqs once.
func checkRun(evs []*agentdv1.AgentEvent) error {
	if len(evs) == 0 {
		return errors.New("no events")
	}
	gap := -1 // where the seqs jump
	for i, ev := range evs {
		want := uint64(1)
		if i > 0 {
			want = evs[i-1].GetSeq() + 1
		}
		seq := ev.GetSeq()
		if (seq != want && (i == 0 || seq < want || gap >= 0)) || ev.GetRunId() != evs[0].GetRunId() {
			return fmt.Errorf("event %d has seq %d of run %s", i, seq, ev.GetRunId())
		}
		if seq != want {
			gap = i
		}
		if (ev.GetAgentEnd() != nil) != (i == len(evs)-1) {
			return fmt.Errorf("agent_end at %d of %d", i, len(evs))
		}
	}
	// Only the repair of an interrupted run skips seqs: its events follow
	// the seqs the run had reserved, which may have streamed and been lost.
	if end := evs[len(evs)-1].GetAgentEnd(); gap >= 0 && end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		return fmt.Errorf("seq %d follows seq %d in a run that ended %v", evs[gap].GetSeq(), evs[gap-1].GetSeq(), end.GetOutcome())
	}
	return nil
}

// Sessions prompted round-robin on three replicas, each followed by Attach
// on another replica: every attached stream is the prompt's stream, event
// for event, and the sessions are readable from every replica.
func TestReplicasServeEverySessionFromAnyReplica(t *testing.T) {
	_, ps := startReplicas(t, 3)
	clients := []agentdv1.AgentServiceClient{ps[0].client(), ps[1].client(), ps[2].client()}
	const sessions, workers = 300, 24
	answer := &agentdv1.AssistantMessage{Content: texts(strings.Repeat("the port is 8080. ", 20))}
	jobs := make(chan int)
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				errs <- promptAndAttach(t, clients[i%3], clients[(i+1)%3], clients[(i+2)%3], answer)
			}
		}()
	}
	for i := range sessions {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func promptAndAttach(t *testing.T, owner, follower, reader agentdv1.AgentServiceClient, answer *agentdv1.AssistantMessage) error {
	ctx := testCtx(t)
	resp, err := owner.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{answer}, TokensPerSecond: 2000}}})
	if err != nil {
		return err
	}
	id := resp.GetSession().GetId()
	stream, err := owner.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("port?")})
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	attached := make(chan []*agentdv1.AgentEvent, 1)
	attachErr := make(chan error, 1)
	go func() {
		evs, err := drain(follower.Attach(ctx, &agentdv1.AttachRequest{SessionId: id, RunId: first.GetRunId()}))
		attached <- evs
		attachErr <- err
	}()
	rest, err := drain(stream, nil)
	if err != nil {
		return fmt.Errorf("session %s: prompt stream: %w", id, err)
	}
	prompted := append([]*agentdv1.AgentEvent{first}, rest...)
	got := <-attached
	if err := <-attachErr; err != nil {
		return fmt.Errorf("session %s: Attach on another replica: %w", id, err)
	}
	if err := checkRun(prompted); err != nil {
		return fmt.Errorf("session %s: prompt stream: %w", id, err)
	}
	if len(got) != len(prompted) {
		return fmt.Errorf("session %s: Attach on another replica got %d events, the prompt stream %d", id, len(got), len(prompted))
	}
	for i := range got {
		if !proto.Equal(got[i], prompted[i]) {
			return fmt.Errorf("session %s: attached event %d differs:\n%v\n%v", id, i+1, got[i], prompted[i])
		}
	}
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		return fmt.Errorf("session %s: %v %s", id, end.GetOutcome(), end.GetErrorMessage())
	}
	tr, err := reader.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: id})
	if err != nil || len(tr.GetEntries()) != 2 || !proto.Equal(tr.GetEntries()[1].GetMessage().GetAssistant().GetContent()[0], answer.GetContent()[0]) {
		return fmt.Errorf("session %s: transcript on the third replica: %v, %v", id, tr.GetEntries(), err)
	}
	return nil
}

// The replica that owns 100 waiting runs is killed: within the lease and
// 5 s another replica has closed every run as interrupted, with the open
// tool call answered; Continue then works on any replica and no
// transcript has a message twice or misses one.
func TestKilledReplicasRunsAreClosedByAnother(t *testing.T) {
	_, ps := startReplicas(t, 3)
	owner, b, c := ps[0].client(), ps[1].client(), ps[2].client()
	const runs = 100
	ids := make([]string, runs)
	runIDs := make([]string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		ids[i] = createSession(t, owner, clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runIDs[i], _ = startWaiting(t, owner, ids[i], isToolCallRequested)
		}()
	}
	wg.Wait()
	for i, id := range ids {
		s, err := b.GetSession(testCtx(t), &agentdv1.GetSessionRequest{SessionId: id})
		if err != nil || s.GetSession().GetActiveRunId() != runIDs[i] {
			t.Fatalf("another replica sees session %s as %v, %v; want running %s", id, s.GetSession(), err, runIDs[i])
		}
	}
	// The owner renews the leases of its runs every third of the lease.
	for deadline := time.Now().Add(testLease); metric(t, ps[0].metrics, "agentd_leases_held") != runs; {
		if time.Now().After(deadline) {
			t.Fatalf("the owner reports %v leases held, want %d", metric(t, ps[0].metrics, "agentd_leases_held"), runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := time.Now()
	ps[0].kill()

	deadline := killed.Add(testLease + 5*time.Second)
	for i, id := range ids {
		client := []agentdv1.AgentServiceClient{b, c}[i%2]
		evs, err := drain(client.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: runIDs[i]}))
		if err != nil {
			t.Fatalf("Attach %s after the kill: %v", id, err)
		}
		end := evs[len(evs)-1].GetAgentEnd()
		if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
			t.Fatalf("session %s: run ended %v %s, want INTERRUPTED", id, end.GetOutcome(), end.GetErrorMessage())
		}
		if err := checkRun(evs); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}
	if took := time.Since(killed); time.Now().After(deadline) {
		t.Fatalf("closing the runs took %v after the kill, more than the lease (%v) + 5s", took, testLease)
	}
	t.Logf("100 runs closed %v after the kill (lease %v)", time.Since(killed).Round(time.Millisecond), testLease)

	for i, id := range ids {
		client := []agentdv1.AgentServiceClient{b, c}[i%2]
		// The client tool was asked to run: its call is in doubt, and the
		// client says what became of it.
		_, err := drain(client.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: id}))
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "ResolveInDoubt") {
			t.Fatalf("Continue %s with its call in doubt: %v", id, err)
		}
		if _, err := client.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: id, ToolCallId: "call-1",
			Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY, Content: texts("picked")}); err != nil {
			t.Fatalf("ResolveInDoubt %s: %v", id, err)
		}
		evs, err := drain(client.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: id}))
		if err != nil {
			t.Fatalf("Continue %s: %v", id, err)
		}
		if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
			t.Fatalf("Continue %s: %v %s", id, end.GetOutcome(), end.GetErrorMessage())
		}
		entries := transcript(t, []agentdv1.AgentServiceClient{c, b}[i%2], id)
		var kinds []string
		seen := map[string]bool{}
		for _, e := range entries {
			if seen[e.GetId()] {
				t.Fatalf("session %s: entry %s twice", id, e.GetId())
			}
			seen[e.GetId()] = true
			m := e.GetMessage()
			switch {
			case m.GetUser() != nil:
				kinds = append(kinds, "user")
			case m.GetAssistant() != nil:
				kinds = append(kinds, "assistant")
			case m.GetToolResult() != nil:
				if m.GetToolResult().GetIsError() || m.GetToolResult().GetToolCallId() != "call-1" || m.GetToolResult().GetContent()[0].GetText().GetText() != "picked" {
					t.Fatalf("session %s: tool result %v", id, m.GetToolResult())
				}
				kinds = append(kinds, "tool_result")
			}
		}
		if got := strings.Join(kinds, " "); got != "user assistant tool_result assistant" {
			t.Fatalf("session %s: transcript %s", id, got)
		}
	}
}

// A replica paused past its lease cannot write when it resumes: another
// replica closed its run, the resumed replica's client gets an agent_end
// that says the lease was lost, and the transcript holds only what was
// written before the pause and the other replica's repair.
func TestPausedReplicaIsFenced(t *testing.T) {
	_, ps := startReplicas(t, 2)
	a, b := ps[0].client(), ps[1].client()
	id := createSession(t, a, clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED))
	runID, stream := startWaiting(t, a, id, isToolCallRequested)
	before := transcript(t, b, id)

	if err := ps[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	evs, err := drain(b.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: runID}))
	if err != nil {
		t.Fatal(err)
	}
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("while A is paused, B ends the run with %v %s", end.GetOutcome(), end.GetErrorMessage())
	}
	repaired := transcript(t, b, id)
	if err := ps[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The resumed replica's run gets its tool result: the write is fenced.
	_, _ = a.SubmitToolResult(testCtx(t), &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "call-1", Content: texts("one")})
	rest, _ := drain(stream, nil)
	if len(rest) == 0 || rest[len(rest)-1].GetAgentEnd() == nil {
		t.Fatalf("the paused replica's stream ended without agent_end: %v", rest)
	}
	if end := rest[len(rest)-1].GetAgentEnd(); !strings.Contains(end.GetErrorMessage(), "lost its lease") {
		t.Fatalf("the paused replica's client got %v %q, want a lost lease", end.GetOutcome(), end.GetErrorMessage())
	}
	if lost := metric(t, ps[0].metrics, "agentd_lease_losses_total"); lost != 1 {
		t.Fatalf("the resumed replica counts %v lost leases, want 1", lost)
	}
	after := transcript(t, b, id)
	if len(repaired) != len(before)+1 || len(after) != len(repaired) {
		t.Fatalf("transcript: %d entries before the pause, %d after the repair, %d after the resume; want n, n+1, n+1", len(before), len(repaired), len(after))
	}
	for i := range after {
		if !proto.Equal(after[i], repaired[i]) {
			t.Fatalf("entry %d changed after the resume:\n%v\n%v", i, after[i], repaired[i])
		}
	}
	// The session works again, from either replica, once the call the
	// repair found in doubt is decided.
	if _, err := a.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: id, ToolCallId: "call-1", Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP}); err != nil {
		t.Fatalf("ResolveInDoubt on the resumed replica: %v", err)
	}
	evs, err = drain(a.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: id}))
	if err != nil || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue on the resumed replica: %v", err)
	}
}

// Two replicas racing Prompt on one session: exactly one run starts, the
// other call gets FAILED_PRECONDITION naming that run.
func TestRacingPromptsOnTwoReplicasStartOneRun(t *testing.T) {
	_, ps := startReplicas(t, 2)
	clients := []agentdv1.AgentServiceClient{ps[0].client(), ps[1].client()}
	for round := range 20 {
		id := createSession(t, clients[0], clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		runs := make([]string, 2)
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("pick one"), Detach: true})
				// The winner's run waits for the tool result; its prompt is
				// stored by then.
				for err == nil {
					var ev *agentdv1.AgentEvent
					if ev, err = stream.Recv(); err == nil && ev.GetToolCallRequested() != nil {
						runs[i] = ev.GetRunId()
						break
					}
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				continue
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is already running run") {
				t.Fatalf("round %d: replica %d: %v, want FAILED_PRECONDITION already running", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d runs started, want 1 (%v)", round, won, errs)
		}
		users := 0
		for _, e := range transcript(t, clients[1], id) {
			if e.GetMessage().GetUser() != nil {
				users++
			}
		}
		if users != 1 {
			t.Fatalf("round %d: %d prompts stored, want 1", round, users)
		}
	}
}

// Steer, FollowUp, SubmitToolResult, ResolveApproval and Abort sent to a
// replica that does not run the session reach the one that does, with the
// codes and texts of one process.
func TestControlsReachTheOwningReplica(t *testing.T) {
	_, ps := startReplicas(t, 2)
	a, b := ps[0].client(), ps[1].client()
	ctx := testCtx(t)

	id := createSession(t, a, clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK))
	_, stream := startWaiting(t, a, id, isApprovalRequested)
	// Refusals: the same on the owner and on the other replica.
	for _, c := range []agentdv1.AgentServiceClient{a, b} {
		_, err := c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "nope", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `tool call "nope"`) {
			t.Fatalf("ResolveApproval of an unknown call: %v", err)
		}
	}
	_, errA := a.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "nope", Content: texts("x")})
	_, errB := b.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "nope", Content: texts("x")})
	if status.Code(errA) != status.Code(errB) || status.Convert(errA).Message() != status.Convert(errB).Message() || errA == nil {
		t.Fatalf("SubmitToolResult of an unknown call: owner %v, other replica %v", errA, errB)
	}
	steered, err := b.Steer(ctx, &agentdv1.SteerRequest{SessionId: id, Content: texts("use the blue one")})
	if err != nil || steered.GetQueued() != 1 {
		t.Fatalf("Steer on the other replica: %v, %v", steered, err)
	}
	followed, err := b.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: id, Content: texts("then stop")})
	if err != nil || followed.GetQueued() != 1 {
		t.Fatalf("FollowUp on the other replica: %v, %v", followed, err)
	}
	if _, err := b.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "call-1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, DecidedBy: "ops"}); err != nil {
		t.Fatalf("ResolveApproval on the other replica: %v", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("owner's stream: %v", err)
		}
		if ev.GetToolCallRequested() != nil {
			break
		}
	}
	if _, err := b.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "call-1", Content: texts("blue")}); err != nil {
		t.Fatalf("SubmitToolResult on the other replica: %v", err)
	}
	rest, err := drain(stream, nil)
	if err != nil || rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("owner's run: %v %v", rest[len(rest)-1], err)
	}
	var texts []string
	for _, e := range transcript(t, b, id) {
		m := e.GetMessage()
		if u := m.GetUser(); u != nil {
			texts = append(texts, u.GetContent()[0].GetText().GetText())
		}
		if tr := m.GetToolResult(); tr != nil {
			texts = append(texts, tr.GetContent()[0].GetText().GetText())
		}
	}
	if got := strings.Join(texts, "|"); got != "pick one|blue|use the blue one|then stop" {
		t.Fatalf("the transcript's user messages and tool results: %s", got)
	}

	// Abort through the other replica ends the owner's run; then both
	// replicas answer Abort as for an idle session.
	id2 := createSession(t, a, clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED))
	runID, stream2 := startWaiting(t, a, id2, isToolCallRequested)
	ab, err := b.Abort(ctx, &agentdv1.AbortRequest{SessionId: id2})
	if err != nil || ab.GetRunId() != runID {
		t.Fatalf("Abort on the other replica: %v, %v", ab, err)
	}
	rest, _ = drain(stream2, nil)
	if end := rest[len(rest)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("owner's run after Abort: %v", end)
	}
	_, errA = a.Abort(ctx, &agentdv1.AbortRequest{SessionId: id2})
	_, errB = b.Abort(ctx, &agentdv1.AbortRequest{SessionId: id2})
	if status.Code(errA) != codes.FailedPrecondition || status.Convert(errA).Message() != status.Convert(errB).Message() {
		t.Fatalf("Abort of an idle session: owner %v, other replica %v", errA, errB)
	}
}

// While the database refuses connections the replicas report NOT_SERVING
// and a run that needs the database ends with an error, not half written;
// when the database is back they serve again and the session continues.
func TestDatabaseOutageMidRun(t *testing.T) {
	dsn, ps := startReplicas(t, 1)
	a := ps[0].client()
	id := createSession(t, a, clientToolConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED))
	_, stream := startWaiting(t, a, id, isToolCallRequested)
	before := transcript(t, a, id)

	admin, err := pgx.Connect(testCtx(t), pgtest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(testCtx(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS false", pgx.Identifier{dbName}.Sanitize()))
	exec(fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'", dbName))
	health := healthpb.NewHealthClient(ps[0].conn())
	waitHealth(t, health, healthpb.HealthCheckResponse_NOT_SERVING)
	// The waiting run gets its result, which it cannot store.
	_, _ = a.SubmitToolResult(testCtx(t), &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "call-1", Content: texts("one")})
	rest, _ := drain(stream, nil)
	if len(rest) == 0 || rest[len(rest)-1].GetAgentEnd() == nil {
		t.Fatalf("the run's stream ended without agent_end during the outage: %v", rest)
	}
	t.Logf("run during the outage: %v %s", rest[len(rest)-1].GetAgentEnd().GetOutcome(), rest[len(rest)-1].GetAgentEnd().GetErrorMessage())

	exec(fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS true", pgx.Identifier{dbName}.Sanitize()))
	waitHealth(t, health, healthpb.HealthCheckResponse_SERVING)
	// Nothing half-written: the transcript is what it was, plus whole
	// messages only; the session can be continued once the run is closed.
	deadline := time.Now().Add(testLease + 10*time.Second)
	for {
		s, err := a.GetSession(testCtx(t), &agentdv1.GetSessionRequest{SessionId: id})
		if err == nil && s.GetSession().GetActiveRunId() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session is still running after the outage: %v, %v", s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := transcript(t, a, id)
	for i := range before {
		if !proto.Equal(after[i], before[i]) {
			t.Fatalf("entry %d changed", i)
		}
	}
	// The client tool's call was asked for and never answered in the
	// store: it is in doubt until the client says what became of it.
	if _, err := a.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: id, ToolCallId: "call-1",
		Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY, Content: texts("one")}); err != nil {
		t.Fatalf("ResolveInDoubt after the outage: %v", err)
	}
	evs, err := drain(a.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: id}))
	if err != nil || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue after the outage: %v, %v", evs, err)
	}
}

func waitHealth(t *testing.T, h healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health is %v (%v), want %v", resp.GetStatus(), err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

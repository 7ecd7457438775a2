package uistream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// uiPart is the part of an AI SDK UI message part the handler reads: text,
// the data-agentd-interrupt parts the stream sent, and tool parts with the
// user's answers (useChat's addToolApprovalResponse and addToolOutput).
type uiPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// ID is a data part's id: the interrupt id of data-agentd-interrupt.
	ID         string          `json:"id"`
	ToolCallID string          `json:"toolCallId"`
	State      string          `json:"state"`
	Output     json.RawMessage `json:"output"`
	ErrorText  string          `json:"errorText"`
	Approval   *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	} `json:"approval"`
}

// isToolPart reports whether p is a tool invocation: "tool-<name>" for
// tools the client declared, "dynamic-tool" for the others.
func (p uiPart) isToolPart() bool {
	return strings.HasPrefix(p.Type, "tool-") || p.Type == "dynamic-tool"
}

// nativeAnswers turns the answers useChat puts into the last assistant
// message into resume entries: a tool part in state approval-responded
// answers its approval (its approval id is the interrupt id the stream's
// tool-approval-request carried), and a tool part with an output
// (output-available, output-error) answers the client tool call a
// data-agentd-interrupt part of the same message asked for. A part the
// stream itself completed (a server tool's output) answers nothing.
func nativeAnswers(field string, m chatMessage) ([]resumeEntry, error) {
	clientTools := map[string]string{}
	for _, p := range m.Parts {
		if p.Type != "data-agentd-interrupt" {
			continue
		}
		if in, err := parseInterrupt(p.ID); err == nil && in.kind == kindClientTool {
			clientTools[in.key] = p.ID
		}
	}
	var entries []resumeEntry
	for i, p := range m.Parts {
		if !p.isToolPart() {
			continue
		}
		pf := fmt.Sprintf("%s.parts[%d]", field, i)
		switch p.State {
		case "approval-responded":
			if p.Approval == nil || p.Approval.Approved == nil {
				return nil, invalid(pf+".approval", "state approval-responded needs approval.id and approval.approved")
			}
			if _, err := parseInterrupt(p.Approval.ID); err != nil {
				return nil, invalid(pf+".approval.id", "%v", err)
			}
			decision := agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
			if *p.Approval.Approved {
				decision = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
			}
			payload, _ := json.Marshal(map[string]string{"decision": decision.String(), "reason": p.Approval.Reason})
			entries = append(entries, resumeEntry{InterruptID: p.Approval.ID, Status: "resolved", Payload: payload})
		case "output-available", "output-error":
			id, ok := clientTools[p.ToolCallID]
			if !ok {
				continue
			}
			text, isError := p.ErrorText, p.State == "output-error"
			result := map[string]any{"isError": isError}
			if !isError {
				var s string
				if json.Unmarshal(p.Output, &s) == nil {
					text = s
				} else {
					text = string(p.Output)
					result["details"] = p.Output
				}
			}
			result["content"] = []any{map[string]any{"text": map[string]string{"text": text}}}
			payload, err := json.Marshal(result)
			if err != nil {
				return nil, invalid(pf+".output", "not JSON: %v", err)
			}
			entries = append(entries, resumeEntry{InterruptID: id, Status: "resolved", Payload: payload})
		}
	}
	if len(entries) == 0 {
		return nil, invalid(field, "the last message is the assistant's and answers nothing: it has no tool part in state approval-responded, nor an output for a client tool the run asked for; end the messages with the user's prompt")
	}
	return entries, nil
}

// answeredBefore reports whether err says the interrupt was answered
// already: useChat sends a message again with the answers it had, and the
// stream then goes on from them.
func answeredBefore(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == agent.ReasonName(agentdv1.ErrorReason_ERROR_REASON_ANSWER_TOO_LATE) {
			return true
		}
	}
	return false
}

// reconnectSession is the session of useChat's reconnect request,
// GET <AISDKPath>/<chat id>/stream, or "" for another path.
func reconnectSession(path string) string {
	rest, ok := strings.CutPrefix(path, AISDKPath+"/")
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, "/stream")
	if !ok || id == "" || strings.Contains(id, "/") {
		return ""
	}
	return id
}

// reconnect opens the stream of useChat's resumeStream: the session's
// active run from its first event, or errNoActiveRun (204 No Content,
// which useChat reads as "nothing to resume").
func (h *handler) reconnect(ctx context.Context, sessionID string) (grpc.ServerStreamingClient[agentdv1.AgentEvent], error) {
	res, err := h.client.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		return nil, err
	}
	if res.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_RUNNING {
		return nil, errNoActiveRun
	}
	return h.client.Attach(ctx, &agentdv1.AttachRequest{SessionId: sessionID, RunId: res.GetSession().GetActiveRunId()})
}

// errNoActiveRun says a reconnect found nothing streaming.
var errNoActiveRun = errors.New("no active run")

// writeNoActiveRun answers a reconnect that found nothing to resume.
func writeNoActiveRun(w http.ResponseWriter) {
	w.WriteHeader(http.StatusNoContent)
}

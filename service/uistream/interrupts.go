package uistream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Kinds of interrupt: what a run waits for, and which RPC answers it.
const (
	kindApproval   = "approval"    // ResolveApproval
	kindClientTool = "client_tool" // SubmitToolResult
	kindHook       = "hook"        // SubmitHookResult
)

// interrupt identifies one wait of a run. Its id, "<kind>/<run id>/<seq>/<key>"
// (key is the tool call id or the hook's request id), is all a client
// echoes to answer it: the answer needs no state on the server, so any
// replica, after any restart, can take it.
type interrupt struct {
	kind  string
	runID string
	seq   uint64
	key   string
}

func (i interrupt) id() string {
	return i.kind + "/" + i.runID + "/" + strconv.FormatUint(i.seq, 10) + "/" + i.key
}

func parseInterrupt(s string) (interrupt, error) {
	f := strings.SplitN(s, "/", 4)
	if len(f) != 4 || f[1] == "" || f[3] == "" {
		return interrupt{}, fmt.Errorf("%q is not an interrupt id of agentd (<kind>/<run id>/<seq>/<key>, as RUN_FINISHED's interrupts or tool-approval-request's approvalId carry it)", s)
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return interrupt{}, fmt.Errorf("%q: the seq %q is not a number", s, f[2])
	}
	switch f[0] {
	case kindApproval, kindClientTool, kindHook:
	default:
		return interrupt{}, fmt.Errorf("%q: unknown kind %q (approval, client_tool or hook)", s, f[0])
	}
	return interrupt{kind: f[0], runID: f[1], seq: seq, key: f[3]}, nil
}

// resumeEntry answers one interrupt: AG-UI's ResumeEntry. The payload is
// the JSON (proto3 JSON mapping) of the request that answers the
// interrupt's kind, without session_id and the call's or request's id,
// which the interrupt id names: ResolveApprovalRequest for approval (such
// as {"decision":"APPROVAL_DECISION_ALLOWED"}), SubmitToolResultRequest
// for client_tool, SubmitHookResultRequest for hook. Status "cancelled"
// needs no payload: it denies the approval or the hook, or fails the
// client tool call.
type resumeEntry struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload"`
}

// cancelledReason is the reason a cancelled interrupt is answered with.
const cancelledReason = "the user cancelled it"

// answer sends the answer of e to the run.
func answer(ctx context.Context, client agentdv1.AgentServiceClient, sessionID string, field string, e resumeEntry) (interrupt, error) {
	in, err := parseInterrupt(e.InterruptID)
	if err != nil {
		return interrupt{}, invalid(field+".interruptId", "%v", err)
	}
	cancelled := false
	switch e.Status {
	case "resolved", "":
	case "cancelled":
		cancelled = true
	default:
		return interrupt{}, invalid(field+".status", "%q, want resolved or cancelled", e.Status)
	}
	payload := func(m proto.Message) error {
		if len(e.Payload) == 0 || string(e.Payload) == "null" {
			if cancelled {
				return nil
			}
			return invalid(field+".payload", "required for a resolved interrupt of kind %s", in.kind)
		}
		if err := protojson.Unmarshal(e.Payload, m); err != nil {
			return invalid(field+".payload", "not the JSON of a %s: %v", m.ProtoReflect().Descriptor().Name(), err)
		}
		return nil
	}
	switch in.kind {
	case kindApproval:
		req := &agentdv1.ResolveApprovalRequest{}
		if err := payload(req); err != nil {
			return in, err
		}
		req.SessionId, req.ToolCallId = sessionID, in.key
		if cancelled {
			req.Decision, req.Reason = agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, cancelledReason
		}
		_, err = client.ResolveApproval(ctx, req)
	case kindClientTool:
		req := &agentdv1.SubmitToolResultRequest{}
		if err := payload(req); err != nil {
			return in, err
		}
		req.SessionId, req.ToolCallId = sessionID, in.key
		if cancelled {
			req.IsError = true
			req.Content = []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: cancelledReason}}}}
		}
		_, err = client.SubmitToolResult(ctx, req)
	case kindHook:
		req := &agentdv1.SubmitHookResultRequest{}
		if err := payload(req); err != nil {
			return in, err
		}
		req.SessionId, req.RequestId = sessionID, in.key
		if cancelled {
			req.Verdict, req.Reason = agentdv1.HookVerdict_HOOK_VERDICT_DENY, cancelledReason
		}
		_, err = client.SubmitHookResult(ctx, req)
	}
	return in, err
}

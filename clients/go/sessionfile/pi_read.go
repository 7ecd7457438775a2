// Package sessionfile moves sessions in and out of agentd as files: the
// length-delimited agentd.v1.SessionRecord format of ExportSession (Export,
// Import), and pi's session files (ReadPi, WritePi), over the generated Go
// client.
package sessionfile

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// pi's session files (pi-coding-agent 0.73, version 3): a header line
// {"type":"session","version":3,"id","timestamp","cwd"}, then one entry per
// line with id, parentId and type. Older versions migrate as pi migrates
// them: version 1 had no ids (each entry follows the one before), version 2
// called custom messages "hookMessage".
const piSessionVersion = 3

// The session labels an imported pi session keeps its header in.
const (
	LabelPiSessionID = "pi.session_id"
	LabelPiCWD       = "pi.cwd"
	LabelPiTimestamp = "pi.timestamp"
	LabelPiParent    = "pi.parent_session"
)

// piExtensionType marks pi entries agentd has no kind for ("custom",
// "session_info"): they are kept verbatim as an Extension whose payload is
// the entry as a google.protobuf.Struct.
const piExtensionType = "type.googleapis.com/google.protobuf.Struct"

// ReadPi reads a pi session file as SessionRecords: a header (pi's session
// id, cwd, timestamp and parent session as the session labels pi.*; the
// leaf is the last entry, as pi has it), then the entries with pi's ids.
func ReadPi(r io.Reader) ([]*agentdv1.SessionRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	var lines []map[string]any
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		lines = append(lines, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lines) == 0 || lines[0]["type"] != "session" {
		return nil, fmt.Errorf("not a pi session: the first line is not a session header")
	}
	head := lines[0]
	migratePi(lines)
	header := &agentdv1.SessionHeader{Config: &agentdv1.SessionConfig{}, Labels: map[string]string{}}
	if id, _ := head["id"].(string); id != "" {
		header.Labels[LabelPiSessionID] = id
	}
	for label, key := range map[string]string{LabelPiCWD: "cwd", LabelPiTimestamp: "timestamp", LabelPiParent: "parentSession"} {
		if v, _ := head[key].(string); v != "" {
			header.Labels[label] = v
		}
	}
	recs := []*agentdv1.SessionRecord{{Record: &agentdv1.SessionRecord_Header{Header: header}}}
	for i, m := range lines[1:] {
		e, err := piEntry(m)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%v): %w", i+1, m["type"], err)
		}
		recs = append(recs, &agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Entry{Entry: e}})
		header.LeafEntryId = e.GetId()
	}
	header.EntryCount = int64(len(recs) - 1)
	return recs, nil
}

// migratePi brings entries of an older pi file to version 3, as pi does.
func migratePi(lines []map[string]any) {
	version, _ := lines[0]["version"].(float64)
	if version == 0 {
		version = 1
	}
	if version < 2 {
		prev := ""
		for i, m := range lines[1:] {
			id := fmt.Sprintf("v1-%d", i+1)
			m["id"] = id
			if prev == "" {
				m["parentId"] = nil
			} else {
				m["parentId"] = prev
			}
			prev = id
			if idx, ok := m["firstKeptEntryIndex"].(float64); ok && m["type"] == "compaction" {
				if j := int(idx); j >= 1 && j < len(lines) {
					m["firstKeptEntryId"] = fmt.Sprintf("v1-%d", j)
				}
				delete(m, "firstKeptEntryIndex")
			}
		}
	}
	if version < 3 {
		for _, m := range lines[1:] {
			if msg, ok := m["message"].(map[string]any); ok && msg["role"] == "hookMessage" {
				msg["role"] = "custom"
			}
		}
	}
	lines[0]["version"] = float64(piSessionVersion)
}

func piEntry(m map[string]any) (*agentdv1.Entry, error) {
	e := &agentdv1.Entry{Id: str(m, "id"), ParentId: str(m, "parentId")}
	if ts, err := time.Parse(time.RFC3339Nano, str(m, "timestamp")); err == nil {
		e.Time = timestamppb.New(ts)
	}
	switch m["type"] {
	case "message":
		msg, ok := m["message"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no message")
		}
		am, err := piMessage(msg)
		if err != nil {
			return nil, err
		}
		e.Payload = &agentdv1.Entry_Message{Message: am}
	case "custom_message":
		c, err := piBlocks(m["content"])
		if err != nil {
			return nil, err
		}
		display, _ := m["display"].(bool)
		e.Payload = &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{
			CustomType: str(m, "customType"), Content: c, Details: value(m["details"]), VisibleInUi: display, IncludeInModelContext: true, Timestamp: e.GetTime(),
		}}}}
	case "model_change":
		e.Payload = &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{Provider: str(m, "provider"), ModelId: str(m, "modelId")}}
	case "thinking_level_change":
		e.Payload = &agentdv1.Entry_ThinkingLevelChange{ThinkingLevelChange: &agentdv1.ThinkingLevelChange{ThinkingLevel: thinkingLevel(str(m, "thinkingLevel"))}}
	case "compaction":
		s := &agentdv1.CompactionSummary{Summary: str(m, "summary"), FirstKeptEntryId: str(m, "firstKeptEntryId"), TokensBefore: int64(num(m, "tokensBefore")), Timestamp: e.GetTime()}
		if d, ok := m["details"].(map[string]any); ok {
			s.ReadFiles, s.ModifiedFiles = strs(d["readFiles"]), strs(d["modifiedFiles"])
		}
		e.Payload = &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: s}}}
	case "branch_summary":
		e.Payload = &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BranchSummary{BranchSummary: &agentdv1.BranchSummary{
			Summary: str(m, "summary"), FromEntryId: str(m, "fromId"), Timestamp: e.GetTime()}}}}
	case "label":
		e.Payload = &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: str(m, "targetId"), Label: str(m, "label")}}
	default: // "custom", "session_info" and kinds of later pi versions
		st, err := structpb.NewStruct(m)
		if err != nil {
			return nil, err
		}
		payload, err := anypb.New(st)
		if err != nil {
			return nil, err
		}
		e.Payload = &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{
			Payload: payload, Timestamp: e.GetTime()}}}}
	}
	return e, nil
}

func piMessage(m map[string]any) (*agentdv1.AgentMessage, error) {
	ts := millis(m["timestamp"])
	content, err := piBlocks(m["content"])
	if err != nil {
		return nil, err
	}
	switch m["role"] {
	case "user":
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: content, Timestamp: ts}}}, nil
	case "assistant":
		a := &agentdv1.AssistantMessage{Content: content, Api: str(m, "api"), Provider: str(m, "provider"), Model: str(m, "model"),
			StopReason: stopReason(str(m, "stopReason")), ErrorMessage: str(m, "errorMessage"), ResponseId: str(m, "responseId"), Timestamp: ts}
		if u, ok := m["usage"].(map[string]any); ok {
			a.Usage = &agentdv1.Usage{Input: int64(num(u, "input")), Output: int64(num(u, "output")), CacheRead: int64(num(u, "cacheRead")),
				CacheWrite: int64(num(u, "cacheWrite")), TotalTokens: int64(num(u, "totalTokens")), Cost: &agentdv1.Cost{}}
			if c, ok := u["cost"].(map[string]any); ok {
				a.Usage.Cost = &agentdv1.Cost{Input: num(c, "input"), Output: num(c, "output"), CacheRead: num(c, "cacheRead"), CacheWrite: num(c, "cacheWrite"), Total: num(c, "total")}
			}
		}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: a}}, nil
	case "toolResult":
		isError, _ := m["isError"].(bool)
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
			ToolCallId: str(m, "toolCallId"), ToolName: str(m, "toolName"), Content: content, Details: value(m["details"]), IsError: isError, Timestamp: ts}}}, nil
	case "bashExecution":
		b := &agentdv1.BashExecution{Command: str(m, "command"), Output: str(m, "output"), FullOutputPath: str(m, "fullOutputPath"), Timestamp: ts, VisibleInUi: true}
		b.Cancelled, _ = m["cancelled"].(bool)
		b.Truncated, _ = m["truncated"].(bool)
		exclude, _ := m["excludeFromContext"].(bool)
		b.IncludeInModelContext = !exclude
		if code, ok := m["exitCode"].(float64); ok {
			c := int32(code)
			b.ExitCode = &c
		}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: b}}, nil
	case "custom":
		display, _ := m["display"].(bool)
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{
			CustomType: str(m, "customType"), Content: content, Details: value(m["details"]), VisibleInUi: display, IncludeInModelContext: true, Timestamp: ts}}}, nil
	}
	return nil, fmt.Errorf("message role %q is not one agentd knows", m["role"])
}

// piBlocks reads pi content: a string, or text, image, thinking and
// toolCall blocks.
func piBlocks(v any) ([]*agentdv1.ContentBlock, error) {
	if s, ok := v.(string); ok {
		return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}, nil
	}
	list, _ := v.([]any)
	var out []*agentdv1.ContentBlock
	for _, item := range list {
		b, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a content block is not an object")
		}
		switch b["type"] {
		case "text":
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: str(b, "text"), TextSignature: str(b, "textSignature")}}})
		case "thinking":
			redacted, _ := b["redacted"].(bool)
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{
				Thinking: str(b, "thinking"), ThinkingSignature: str(b, "thinkingSignature"), Redacted: redacted}}})
		case "toolCall":
			args, _ := b["arguments"].(map[string]any)
			st, err := structpb.NewStruct(args)
			if err != nil {
				return nil, err
			}
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
				Id: str(b, "id"), Name: str(b, "name"), Arguments: st, ThoughtSignature: str(b, "thoughtSignature")}}})
		case "image":
			data, err := base64.StdEncoding.DecodeString(str(b, "data"))
			if err != nil {
				return nil, fmt.Errorf("image data: %w", err)
			}
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: data, MimeType: str(b, "mimeType")}}})
		default:
			return nil, fmt.Errorf("content block type %q is not one agentd knows", b["type"])
		}
	}
	return out, nil
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

func strs(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func value(v any) *structpb.Value {
	if v == nil {
		return nil
	}
	out, err := structpb.NewValue(v)
	if err != nil {
		return nil
	}
	return out
}

func millis(v any) *timestamppb.Timestamp {
	f, ok := v.(float64)
	if !ok {
		return nil
	}
	return timestamppb.New(time.UnixMilli(int64(f)))
}

// pi's stop reasons and thinking levels, by their agentd names.
var (
	piStopReasons = map[string]agentdv1.StopReason{
		"stop": agentdv1.StopReason_STOP_REASON_STOP, "length": agentdv1.StopReason_STOP_REASON_LENGTH, "toolUse": agentdv1.StopReason_STOP_REASON_TOOL_USE,
		"error": agentdv1.StopReason_STOP_REASON_ERROR, "aborted": agentdv1.StopReason_STOP_REASON_ABORTED,
	}
	piThinkingLevels = map[string]agentdv1.ThinkingLevel{
		"off": agentdv1.ThinkingLevel_THINKING_LEVEL_OFF, "minimal": agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL, "low": agentdv1.ThinkingLevel_THINKING_LEVEL_LOW,
		"medium": agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM, "high": agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, "xhigh": agentdv1.ThinkingLevel_THINKING_LEVEL_XHIGH,
	}
)

func stopReason(s string) agentdv1.StopReason { return piStopReasons[s] }

func thinkingLevel(s string) agentdv1.ThinkingLevel { return piThinkingLevels[s] }

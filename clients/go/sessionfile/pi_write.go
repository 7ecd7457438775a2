package sessionfile

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// piTime is how pi writes an entry's time (JavaScript's toISOString).
const piTime = "2006-01-02T15:04:05.000Z"

// WritePi writes records as a pi session file (version 3): the header, then
// one line per entry in append order with agentd's entry ids. Kinds pi has
// no entry for (approval notices, extensions agentd did not import from pi)
// become pi "custom" entries, which pi keeps and never sends to a model.
func WritePi(w io.Writer, recs []*agentdv1.SessionRecord) error {
	if len(recs) == 0 || recs[0].GetHeader() == nil {
		return fmt.Errorf("no session header")
	}
	h := recs[0].GetHeader()
	head := orderedJSON{{"type", "session"}, {"version", piSessionVersion}, {"id", h.GetLabels()[LabelPiSessionID]}, {"timestamp", h.GetLabels()[LabelPiTimestamp]}, {"cwd", h.GetLabels()[LabelPiCWD]}}
	if head[2].v == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		head[2].v = hex.EncodeToString(b[:])
	}
	if head[3].v == "" {
		head[3].v = time.Now().UTC().Format(piTime)
	}
	if p := h.GetLabels()[LabelPiParent]; p != "" {
		head = append(head, kv{"parentSession", p})
	}
	if err := writeLine(w, head); err != nil {
		return err
	}
	for _, rec := range recs[1:] {
		e := rec.GetEntry()
		if e == nil {
			return fmt.Errorf("a record after the header holds no entry")
		}
		line, err := piLine(e)
		if err != nil {
			return fmt.Errorf("entry %s: %w", e.GetId(), err)
		}
		if err := writeLine(w, line); err != nil {
			return err
		}
	}
	return nil
}

// kv and orderedJSON write a JSON object with its keys in pi's order.
type kv struct {
	k string
	v any
}

type orderedJSON []kv

// MarshalJSON writes the keys in order.
func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		b.Write(k)
		b.WriteByte(':')
		v, err := marshalNoEscape(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func writeLine(w io.Writer, o orderedJSON) error {
	b, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func piLine(e *agentdv1.Entry) (orderedJSON, error) {
	var parent any
	if e.GetParentId() != "" {
		parent = e.GetParentId()
	}
	base := func(typ string) orderedJSON {
		return orderedJSON{{"type", typ}, {"id", e.GetId()}, {"parentId", parent}, {"timestamp", e.GetTime().AsTime().UTC().Format(piTime)}}
	}
	switch p := e.GetPayload().(type) {
	case *agentdv1.Entry_ModelChange:
		return append(base("model_change"), kv{"provider", p.ModelChange.GetProvider()}, kv{"modelId", p.ModelChange.GetModelId()}), nil
	case *agentdv1.Entry_ThinkingLevelChange:
		for name, l := range piThinkingLevels {
			if l == p.ThinkingLevelChange.GetThinkingLevel() {
				return append(base("thinking_level_change"), kv{"thinkingLevel", name}), nil
			}
		}
		return append(base("thinking_level_change"), kv{"thinkingLevel", "off"}), nil
	case *agentdv1.Entry_Label:
		line := append(base("label"), kv{"targetId", p.Label.GetTargetEntryId()})
		if p.Label.GetLabel() != "" {
			line = append(line, kv{"label", p.Label.GetLabel()})
		}
		return line, nil
	case *agentdv1.Entry_McpTools:
		// pi has no kind for it: kept as a custom entry, as agentd's
		// messages pi lacks are.
		return piCustom(base, "agentd.mcp_tools", p.McpTools)
	case *agentdv1.Entry_RedactionNotice:
		return piCustom(base, "agentd.redaction_notice", p.RedactionNotice)
	case *agentdv1.Entry_ApprovalRule:
		return piCustom(base, "agentd.approval_rule", p.ApprovalRule)
	case *agentdv1.Entry_ApprovalRuleRemoval:
		return piCustom(base, "agentd.approval_rule_removal", p.ApprovalRuleRemoval)
	case *agentdv1.Entry_Message:
		m := p.Message
		switch k := m.GetKind().(type) {
		case *agentdv1.AgentMessage_CompactionSummary:
			c := k.CompactionSummary
			line := append(base("compaction"), kv{"summary", c.GetSummary()}, kv{"firstKeptEntryId", c.GetFirstKeptEntryId()}, kv{"tokensBefore", c.GetTokensBefore()})
			if len(c.GetReadFiles())+len(c.GetModifiedFiles()) > 0 {
				line = append(line, kv{"details", orderedJSON{{"readFiles", nonNil(c.GetReadFiles())}, {"modifiedFiles", nonNil(c.GetModifiedFiles())}}})
			}
			return line, nil
		case *agentdv1.AgentMessage_BranchSummary:
			return append(base("branch_summary"), kv{"fromId", k.BranchSummary.GetFromEntryId()}, kv{"summary", k.BranchSummary.GetSummary()}), nil
		case *agentdv1.AgentMessage_Custom:
			c := k.Custom
			line := orderedJSON{{"type", "custom_message"}, {"customType", c.GetCustomType()}, {"content", piContent(c.GetContent())}, {"display", c.GetVisibleInUi()}}
			if c.GetDetails() != nil {
				line = append(line, kv{"details", c.GetDetails().AsInterface()})
			}
			return append(line, base("")[1:]...), nil
		case *agentdv1.AgentMessage_Extension:
			if k.Extension.GetPayload().GetTypeUrl() == piExtensionType {
				st := &structpb.Struct{}
				if err := k.Extension.GetPayload().UnmarshalTo(st); err == nil && st.GetFields()["type"] != nil {
					return fromMap(st.AsMap()), nil
				}
			}
		}
		msg, err := piMessageJSON(m)
		if err != nil {
			return nil, err
		}
		if msg == nil {
			// A kind pi has no message for: kept as a custom entry.
			data, err := protojson.Marshal(m)
			if err != nil {
				return nil, err
			}
			var v any
			_ = json.Unmarshal(data, &v)
			return append(base("custom"), kv{"customType", "agentd.message"}, kv{"data", v}), nil
		}
		return append(base("message"), kv{"message", msg}), nil
	}
	return nil, fmt.Errorf("an entry with no payload")
}

// fromMap orders a pi entry kept verbatim as pi does: type, id, parentId,
// timestamp, then the rest.
func fromMap(m map[string]any) orderedJSON {
	var out orderedJSON
	for _, k := range []string{"type", "id", "parentId", "timestamp"} {
		if v, ok := m[k]; ok {
			out = append(out, kv{k, v})
			delete(m, k)
		}
	}
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// piMessageJSON is a message as pi writes it; nil for a kind pi has none
// for.
func piMessageJSON(m *agentdv1.AgentMessage) (orderedJSON, error) {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return orderedJSON{{"role", "user"}, {"content", piContent(k.User.GetContent())}, {"timestamp", k.User.GetTimestamp().AsTime().UnixMilli()}}, nil
	case *agentdv1.AgentMessage_Assistant:
		a := k.Assistant
		out := orderedJSON{{"role", "assistant"}, {"content", piContent(a.GetContent())}, {"api", a.GetApi()}, {"provider", a.GetProvider()}, {"model", a.GetModel()}}
		if a.GetResponseId() != "" {
			out = append(out, kv{"responseId", a.GetResponseId()})
		}
		u, c := a.GetUsage(), a.GetUsage().GetCost()
		out = append(out, kv{"usage", orderedJSON{{"input", u.GetInput()}, {"output", u.GetOutput()}, {"cacheRead", u.GetCacheRead()}, {"cacheWrite", u.GetCacheWrite()},
			{"totalTokens", u.GetTotalTokens()}, {"cost", orderedJSON{{"input", c.GetInput()}, {"output", c.GetOutput()}, {"cacheRead", c.GetCacheRead()},
				{"cacheWrite", c.GetCacheWrite()}, {"total", c.GetTotal()}}}}})
		for name, r := range piStopReasons {
			if r == a.GetStopReason() {
				out = append(out, kv{"stopReason", name})
			}
		}
		if a.GetErrorMessage() != "" {
			out = append(out, kv{"errorMessage", a.GetErrorMessage()})
		}
		return append(out, kv{"timestamp", a.GetTimestamp().AsTime().UnixMilli()}), nil
	case *agentdv1.AgentMessage_ToolResult:
		t := k.ToolResult
		out := orderedJSON{{"role", "toolResult"}, {"toolCallId", t.GetToolCallId()}, {"toolName", t.GetToolName()}, {"content", piContent(t.GetContent())}}
		if t.GetDetails() != nil {
			out = append(out, kv{"details", t.GetDetails().AsInterface()})
		}
		return append(out, kv{"isError", t.GetIsError()}, kv{"timestamp", t.GetTimestamp().AsTime().UnixMilli()}), nil
	case *agentdv1.AgentMessage_BashExecution:
		b := k.BashExecution
		out := orderedJSON{{"role", "bashExecution"}, {"command", b.GetCommand()}, {"output", b.GetOutput()}}
		if b.ExitCode != nil {
			out = append(out, kv{"exitCode", b.GetExitCode()})
		}
		out = append(out, kv{"cancelled", b.GetCancelled()}, kv{"truncated", b.GetTruncated()})
		if b.GetFullOutputPath() != "" {
			out = append(out, kv{"fullOutputPath", b.GetFullOutputPath()})
		}
		if !b.GetIncludeInModelContext() {
			out = append(out, kv{"excludeFromContext", true})
		}
		return append(out, kv{"timestamp", b.GetTimestamp().AsTime().UnixMilli()}), nil
	}
	return nil, nil
}

// piContent writes blocks as pi's content array.
func piContent(blocks []*agentdv1.ContentBlock) []orderedJSON {
	out := make([]orderedJSON, 0, len(blocks))
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			o := orderedJSON{{"type", "text"}, {"text", x.Text.GetText()}}
			if x.Text.GetTextSignature() != "" {
				o = append(o, kv{"textSignature", x.Text.GetTextSignature()})
			}
			out = append(out, o)
		case *agentdv1.ContentBlock_Thinking:
			o := orderedJSON{{"type", "thinking"}, {"thinking", x.Thinking.GetThinking()}}
			if x.Thinking.GetThinkingSignature() != "" {
				o = append(o, kv{"thinkingSignature", x.Thinking.GetThinkingSignature()})
			}
			if x.Thinking.GetRedacted() {
				o = append(o, kv{"redacted", true})
			}
			out = append(out, o)
		case *agentdv1.ContentBlock_ToolCall:
			o := orderedJSON{{"type", "toolCall"}, {"id", x.ToolCall.GetId()}, {"name", x.ToolCall.GetName()}, {"arguments", x.ToolCall.GetArguments().AsMap()}}
			if x.ToolCall.GetThoughtSignature() != "" {
				o = append(o, kv{"thoughtSignature", x.ToolCall.GetThoughtSignature()})
			}
			out = append(out, o)
		case *agentdv1.ContentBlock_Image:
			out = append(out, orderedJSON{{"type", "image"}, {"data", base64.StdEncoding.EncodeToString(x.Image.GetData())}, {"mimeType", x.Image.GetMimeType()}})
		}
	}
	return out
}

// piCustom is an entry pi has no kind for, as a custom entry whose data is
// the message in protobuf's JSON form.
func piCustom(base func(string) orderedJSON, customType string, m proto.Message) (orderedJSON, error) {
	data, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	_ = json.Unmarshal(data, &v)
	return append(base("custom"), kv{"customType", customType}, kv{"data", v}), nil
}

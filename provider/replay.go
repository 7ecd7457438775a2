package provider

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The wire protocols the adapters speak; Model.API holds one of them.
const (
	APIAnthropicMessages  = "anthropic-messages"
	APIOpenAICompletions  = "openai-completions"
	APIOpenAIResponses    = "openai-responses"
	APIGoogleGenerativeAI = "google-generative-ai"
	// APIFaux is the scripted test model's (package provider/faux).
	APIFaux = "faux"
)

// NoResultText is the text of the synthetic result replay adds for a tool
// call that never got one, as pi words it.
const NoResultText = "No result provided"

// ImageOmittedText replaces an image sent to a model that reads no images.
const ImageOmittedText = "(image omitted: model does not support images)"

// IsFailedAnswer reports whether an assistant message is a failed answer:
// one that ended in ERROR or ABORTED. Replay skips failed answers, so the
// model never sees them; they stay in the transcript for clients and logs,
// and a retry or Continue after one starts from what came before it.
func IsFailedAnswer(m *agentdv1.AssistantMessage) bool {
	sr := m.GetStopReason()
	return sr == agentdv1.StopReason_STOP_REASON_ERROR || sr == agentdv1.StopReason_STOP_REASON_ABORTED
}

// SameModel reports whether m was produced by target, the condition under
// which opaque fields (signatures, encrypted reasoning, item ids) may be
// sent back.
func SameModel(m *agentdv1.AssistantMessage, target Model) bool {
	return m.GetProvider() == target.Provider && m.GetApi() == target.API && m.GetModel() == target.ID
}

// Replay turns a stored conversation into what target may be sent, with the
// rules every adapter shares (pi's transform-messages):
//
//   - failed answers (IsFailedAnswer) are skipped, and so are tool results
//     that answer no call of the kept assistant message before them;
//   - tool results follow the assistant message that called them, as every
//     API demands: a user message that came between a call and its result
//     (an approval notice recorded while the call waited) moves after the
//     results of that assistant message;
//   - a tool call left without a result gets a synthetic error result with
//     NoResultText before the next assistant message, before the user
//     messages that came after it, and at the end;
//   - for the same model, thinking, signatures and redacted blocks pass
//     verbatim; for another model thinking becomes plain text, redacted
//     thinking and empty thinking are dropped, text and thought signatures
//     are dropped, and tool call ids are normalized to what target's API
//     accepts and remapped in the tool results that answer them;
//   - images sent to a TextOnly model become ImageOmittedText.
//
// Replay is pure: it never modifies msgs (changed messages are copies) and
// applying it to its own output changes nothing.
func Replay(msgs []*agentdv1.Message, target Model) []*agentdv1.Message {
	out := make([]*agentdv1.Message, 0, len(msgs)+2)
	// ids holds every tool call id the output uses, so a normalized id
	// never collides with another call's (normalizing can merge ids, and
	// the same model's ids are kept verbatim); idMap renames the calls of
	// the current assistant message for the results that answer them.
	ids := keptToolCallIDs(msgs, target)
	idMap := map[string]string{}
	var pending []*agentdv1.ToolCall
	var pendingAt *agentdv1.AssistantMessage
	answered := map[string]bool{}
	// held are user messages that came while calls were still unanswered.
	var held []*agentdv1.Message

	flush := func() {
		for _, tc := range pending {
			if answered[tc.GetId()] {
				continue
			}
			out = append(out, &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
				ToolCallId: tc.GetId(),
				ToolName:   tc.GetName(),
				Content:    []*agentdv1.ContentBlock{textBlock(NoResultText)},
				IsError:    true,
				Timestamp:  pendingAt.GetTimestamp(),
			}}})
		}
		pending, pendingAt = nil, nil
		clear(answered)
		out = append(out, held...)
		held = held[:0]
	}
	waiting := func() bool {
		for _, tc := range pending {
			if !answered[tc.GetId()] {
				return true
			}
		}
		return false
	}

	for _, msg := range msgs {
		switch r := msg.GetRole().(type) {
		case *agentdv1.Message_User:
			if target.TextOnly {
				if c, changed := omitImages(r.User.GetContent()); changed {
					u := proto.Clone(r.User).(*agentdv1.UserMessage)
					u.Content = c
					msg = &agentdv1.Message{Role: &agentdv1.Message_User{User: u}}
				}
			}
			if waiting() {
				held = append(held, msg)
				continue
			}
			flush()
			out = append(out, msg)
		case *agentdv1.Message_Assistant:
			flush()
			a := r.Assistant
			if IsFailedAnswer(a) {
				continue
			}
			clear(idMap)
			a = transformAssistant(a, target, idMap, ids)
			for _, b := range a.GetContent() {
				if tc := b.GetToolCall(); tc != nil {
					pending = append(pending, tc)
				}
			}
			pendingAt = a
			if a == r.Assistant {
				out = append(out, msg)
			} else {
				out = append(out, &agentdv1.Message{Role: &agentdv1.Message_Assistant{Assistant: a}})
			}
		case *agentdv1.Message_ToolResult:
			tr := r.ToolResult
			id := tr.GetToolCallId()
			if mapped, ok := idMap[id]; ok {
				id = mapped
			}
			if !answers(pending, id) || answered[id] {
				continue // an orphan result: no kept call asked for it
			}
			answered[id] = true
			content, imgChanged := tr.GetContent(), false
			if target.TextOnly {
				content, imgChanged = omitImages(content)
			}
			if id == tr.GetToolCallId() && !imgChanged {
				out = append(out, msg)
				continue
			}
			c := proto.Clone(tr).(*agentdv1.ToolResultMessage)
			c.ToolCallId = id
			c.Content = content
			out = append(out, &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: c}})
		default:
			out = append(out, msg)
		}
	}
	flush()
	return out
}

func answers(calls []*agentdv1.ToolCall, id string) bool {
	for _, tc := range calls {
		if tc.GetId() == id {
			return true
		}
	}
	return false
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

// omitImages replaces images with one placeholder per run of images.
func omitImages(blocks []*agentdv1.ContentBlock) ([]*agentdv1.ContentBlock, bool) {
	has := false
	for _, b := range blocks {
		if b.GetImage() != nil {
			has = true
			break
		}
	}
	if !has {
		return blocks, false
	}
	out := make([]*agentdv1.ContentBlock, 0, len(blocks))
	for _, b := range blocks {
		if b.GetImage() != nil {
			if n := len(out); n > 0 && out[n-1].GetText() != nil && out[n-1].GetText().GetText() == ImageOmittedText {
				continue
			}
			out = append(out, textBlock(ImageOmittedText))
			continue
		}
		out = append(out, b)
	}
	return out, true
}

// transformAssistant returns a itself when nothing changes for target, and a
// modified copy otherwise; idMap collects renamed tool call ids.
func transformAssistant(a *agentdv1.AssistantMessage, target Model, idMap map[string]string, ids map[string]bool) *agentdv1.AssistantMessage {
	same := SameModel(a, target)
	changed := false
	content := make([]*agentdv1.ContentBlock, 0, len(a.GetContent()))
	for _, b := range a.GetContent() {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Thinking:
			t := x.Thinking
			switch {
			case t.GetRedacted():
				if same {
					content = append(content, b)
				} else {
					changed = true
				}
			case same && t.GetThinkingSignature() != "":
				content = append(content, b)
			case strings.TrimSpace(t.GetThinking()) == "":
				changed = true
			case same:
				content = append(content, b)
			default:
				changed = true
				content = append(content, textBlock(t.GetThinking()))
			}
		case *agentdv1.ContentBlock_Text:
			if !same && x.Text.GetTextSignature() != "" {
				changed = true
				content = append(content, textBlock(x.Text.GetText()))
				continue
			}
			content = append(content, b)
		case *agentdv1.ContentBlock_ToolCall:
			tc := x.ToolCall
			if same {
				content = append(content, b)
				continue
			}
			id := uniqueID(NormalizeToolCallID(tc.GetId(), target.API), ids)
			if id == tc.GetId() && tc.GetThoughtSignature() == "" {
				content = append(content, b)
				continue
			}
			changed = true
			if id != tc.GetId() {
				idMap[tc.GetId()] = id
			}
			c := proto.Clone(tc).(*agentdv1.ToolCall)
			c.Id = id
			c.ThoughtSignature = ""
			content = append(content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: c}})
		default:
			content = append(content, b)
		}
	}
	if !changed {
		return a
	}
	c := proto.Clone(a).(*agentdv1.AssistantMessage)
	c.Content = content
	return c
}

// keptToolCallIDs returns the ids of the tool calls Replay sends verbatim:
// those of target's own answers.
func keptToolCallIDs(msgs []*agentdv1.Message, target Model) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		a := m.GetAssistant()
		if a == nil || !SameModel(a, target) {
			continue
		}
		for _, b := range a.GetContent() {
			if tc := b.GetToolCall(); tc != nil {
				ids[tc.GetId()] = true
			}
		}
	}
	return ids
}

// uniqueID returns id, or id with a numeric suffix when another call of the
// output already uses it, and records the result in ids. The suffix keeps
// the id within every API's alphabet and length (it replaces the end of a
// long id).
func uniqueID(id string, ids map[string]bool) string {
	if !ids[id] {
		ids[id] = true
		return id
	}
	for n := 2; ; n++ {
		suffix := "_" + strconv.Itoa(n)
		cand := truncate(id, 40-len(suffix)) + suffix
		if !ids[cand] {
			ids[cand] = true
			return cand
		}
	}
}

// NormalizeToolCallID rewrites a tool call id from another model into the
// form api accepts. It is idempotent. Anthropic and Gemini take
// [a-zA-Z0-9_-]{1,64}; Chat Completions takes the call part of a Responses
// "call|item" id, at most 40 characters; Responses keeps both parts, each
// sanitized, the item part starting with "fc".
func NormalizeToolCallID(id, api string) string {
	switch api {
	case APIAnthropicMessages, APIGoogleGenerativeAI:
		return truncate(sanitizeID(id), 64)
	case APIOpenAICompletions:
		call, _, _ := strings.Cut(id, "|")
		return truncate(sanitizeID(call), 40)
	case APIOpenAIResponses:
		call, item, ok := strings.Cut(id, "|")
		call = strings.TrimRight(truncate(sanitizeID(call), 64), "_")
		if !ok {
			return call
		}
		item = sanitizeID(item)
		if !strings.HasPrefix(item, "fc") {
			item = "fc_" + item
		}
		item = strings.TrimRight(truncate(item, 64), "_")
		return call + "|" + item
	default:
		return id
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func sanitizeID(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	b := []byte(s)
	for i := range b {
		if !idByte(b[i]) {
			b[i] = '_'
		}
	}
	return string(b)
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

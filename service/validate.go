package service

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Fixed bounds of request fields, as the proto documents them.
const (
	// maxLabelValueBytes bounds a label's value.
	maxLabelValueBytes = 1024
	// maxLabels bounds the labels of one session.
	maxLabels = 64
	// maxReasonBytes bounds an approval's reason.
	maxReasonBytes = 4096
	// maxTitleBytes bounds a session's title.
	maxTitleBytes = 1024
)

// checkTitle validates a session title.
func checkTitle(title string) error {
	if len(title) > maxTitleBytes {
		return invalid("title", "%d bytes exceed the limit of %d", len(title), maxTitleBytes)
	}
	return nil
}

// Limits bound what one request may carry. The zero value of a field means
// its default (see DefaultLimits).
type Limits struct {
	// MaxTextBytes bounds one text block.
	MaxTextBytes int
	// MaxImageBytes bounds one image.
	MaxImageBytes int
	// MaxBlocks bounds the blocks of one message.
	MaxBlocks int
	// MaxSystemPromptBytes bounds the system prompt.
	MaxSystemPromptBytes int
	// MaxMessagesPerAppend bounds AppendMessages.
	MaxMessagesPerAppend int
}

// DefaultLimits are the limits agentd applies unless told otherwise.
var DefaultLimits = Limits{
	MaxTextBytes:         1 << 20,
	MaxImageBytes:        10 << 20,
	MaxBlocks:            256,
	MaxSystemPromptBytes: 1 << 20,
	MaxMessagesPerAppend: 1000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxTextBytes > 0 {
		d.MaxTextBytes = l.MaxTextBytes
	}
	if l.MaxImageBytes > 0 {
		d.MaxImageBytes = l.MaxImageBytes
	}
	if l.MaxBlocks > 0 {
		d.MaxBlocks = l.MaxBlocks
	}
	if l.MaxSystemPromptBytes > 0 {
		d.MaxSystemPromptBytes = l.MaxSystemPromptBytes
	}
	if l.MaxMessagesPerAppend > 0 {
		d.MaxMessagesPerAppend = l.MaxMessagesPerAppend
	}
	return d
}

// Character sets of the names clients choose. Checked with strings.Trim,
// not regular expressions: a bounded repetition such as {1,128} compiles
// into a program of that many steps, which cost every start of agentd
// ~2 ms of package init.
const (
	alphanumerics = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	// idChars are what an id a client chooses may hold.
	idChars = alphanumerics + "._:-"
	// runMetadataKeyChars are what a run metadata key may hold.
	runMetadataKeyChars = alphanumerics + "._:/-"
	// maxRunMetadataKeyBytes is the longest a run metadata key may be.
	maxRunMetadataKeyBytes = 64
)

// madeOf reports whether s has between 1 and maxBytes bytes, all in chars
// (ASCII).
func madeOf(s, chars string, maxBytes int) bool {
	return s != "" && len(s) <= maxBytes && strings.Trim(s, chars) == ""
}

// validID reports whether id is one a client may choose.
func validID(id string) bool { return madeOf(id, idChars, persistence.MaxIDLength) }

// checkID validates a required id field.
func checkID(field, id string) error {
	if id == "" {
		return invalid(field, "required")
	}
	if !validID(id) {
		return invalid(field, "%q is not a valid id (1 to %d characters of A-Z a-z 0-9 . _ : -)", truncate(id, 40), persistence.MaxIDLength)
	}
	return nil
}

// checkOptionalID validates an id field that may be empty.
func checkOptionalID(field, id string) error {
	if id == "" {
		return nil
	}
	return checkID(field, id)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// blockKinds says which content blocks a message of some role may hold.
type blockKinds struct {
	role                        string
	images, thinking, toolCalls bool
}

// What each role can carry: user messages and tool results carry text and
// images, the model answers with text, thinking and tool calls.
var (
	userBlocks      = blockKinds{role: "user messages", images: true}
	resultBlocks    = blockKinds{role: "tool results", images: true}
	assistantBlocks = blockKinds{role: "assistant messages", thinking: true, toolCalls: true}
)

// checkContent validates content blocks; required demands at least one.
func (l Limits) checkContent(field string, blocks []*agentdv1.ContentBlock, kinds blockKinds, required bool) error {
	if required && len(blocks) == 0 {
		return invalid(field, "at least one text or image block is required")
	}
	if len(blocks) > l.MaxBlocks {
		return invalid(field, "%d blocks exceed the limit of %d", len(blocks), l.MaxBlocks)
	}
	for i, b := range blocks {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch blk := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			if blk.Text.GetText() == "" && !kinds.toolCalls {
				return invalid(f+".text.text", "empty text; leave the block out instead")
			}
			if len(blk.Text.GetText()) > l.MaxTextBytes {
				return invalid(f+".text.text", "%d bytes exceed the limit of %d", len(blk.Text.GetText()), l.MaxTextBytes)
			}
		case *agentdv1.ContentBlock_Image:
			if !kinds.images {
				return invalid(f+".image", "%s hold no images", kinds.role)
			}
			if blk.Image.GetMimeType() == "" {
				return invalid(f+".image.mime_type", "required (%s)", imageTypeList())
			}
			if !provider.IsImageMIMEType(blk.Image.GetMimeType()) {
				return invalid(f+".image.mime_type", "%q is not supported; use %s", blk.Image.GetMimeType(), imageTypeList())
			}
			if len(blk.Image.GetData()) == 0 {
				return invalid(f+".image.data", "empty image")
			}
			if len(blk.Image.GetData()) > l.MaxImageBytes {
				return invalid(f+".image.data", "%d bytes exceed the image limit of %d", len(blk.Image.GetData()), l.MaxImageBytes)
			}
		case *agentdv1.ContentBlock_Thinking:
			if !kinds.thinking {
				return invalid(f+".thinking", "only assistant messages hold thinking blocks")
			}
		case *agentdv1.ContentBlock_ToolCall:
			if !kinds.toolCalls {
				return invalid(f+".tool_call", "only assistant messages hold tool calls")
			}
			if blk.ToolCall.GetId() == "" {
				return invalid(f+".tool_call.id", "required")
			}
			if err := provider.CheckToolName(blk.ToolCall.GetName()); err != nil {
				return invalid(f+".tool_call.name", "%v", err)
			}
		default:
			return invalid(f, "no block kind set (text, image, thinking or tool_call)")
		}
	}
	return nil
}

// checkAgentMessage validates a message a client asks to append.
func (l Limits) checkAgentMessage(field string, m *agentdv1.AgentMessage) error {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return l.checkContent(field+".user.content", k.User.GetContent(), userBlocks, true)
	case *agentdv1.AgentMessage_Assistant:
		if k.Assistant.GetStopReason() == agentdv1.StopReason_STOP_REASON_UNSPECIFIED {
			return invalid(field+".assistant.stop_reason", "required on a finished message")
		}
		return l.checkContent(field+".assistant.content", k.Assistant.GetContent(), assistantBlocks, false)
	case *agentdv1.AgentMessage_ToolResult:
		if k.ToolResult.GetToolCallId() == "" {
			return invalid(field+".tool_result.tool_call_id", "required")
		}
		return l.checkContent(field+".tool_result.content", k.ToolResult.GetContent(), resultBlocks, false)
	case *agentdv1.AgentMessage_ApprovalNotice:
		if k.ApprovalNotice.GetToolCallId() == "" {
			return invalid(field+".approval_notice.tool_call_id", "required")
		}
		if k.ApprovalNotice.GetDecision() == agentdv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED {
			return invalid(field+".approval_notice.decision", "required")
		}
	case *agentdv1.AgentMessage_BashExecution:
		if k.BashExecution.GetCommand() == "" {
			return invalid(field+".bash_execution.command", "required")
		}
	case *agentdv1.AgentMessage_Custom:
		if k.Custom.GetCustomType() == "" {
			return invalid(field+".custom.custom_type", "required")
		}
		return l.checkContent(field+".custom.content", k.Custom.GetContent(), userBlocks, false)
	case *agentdv1.AgentMessage_BranchSummary:
		if k.BranchSummary.GetSummary() == "" {
			return invalid(field+".branch_summary.summary", "required")
		}
	case *agentdv1.AgentMessage_CompactionSummary:
		if k.CompactionSummary.GetSummary() == "" {
			return invalid(field+".compaction_summary.summary", "required")
		}
	case *agentdv1.AgentMessage_Extension:
		if k.Extension.GetPayload().GetTypeUrl() == "" {
			return invalid(field+".extension.payload", "required, with a type_url naming the client's message type")
		}
		return l.checkContent(field+".extension.model_content", k.Extension.GetModelContent(), userBlocks, false)
	default:
		return invalid(field, "no message kind set")
	}
	return nil
}

// imageTypeList names the accepted image types for messages.
func imageTypeList() string {
	types := provider.ImageMIMETypes()
	return strings.Join(types[:len(types)-1], ", ") + " or " + types[len(types)-1]
}

// Bounds of a run's model settings and metadata, as the proto documents
// them (session.proto ModelSettings, service.proto PromptRequest.metadata).
const (
	maxStopSequences         = 8
	maxStopSequenceBytes     = 256
	maxProviderOptionsBytes  = 16 << 10
	maxTemperature           = 2.0
	maxRunMetadata           = 32
	maxRunMetadataValueBytes = 512
)

// checkModelSettings validates the ranges of model settings at field (a
// session's config.model_settings, a run's model_settings); what the model
// can honour is the agent's check.
func checkModelSettings(field string, ms *agentdv1.ModelSettings) error {
	if ms == nil {
		return nil
	}
	if ms.Temperature != nil && (ms.GetTemperature() < 0 || ms.GetTemperature() > maxTemperature || math.IsNaN(ms.GetTemperature())) {
		return invalid(field+".temperature", "%v is out of range (0 to %v)", ms.GetTemperature(), maxTemperature)
	}
	if ms.TopP != nil && !(ms.GetTopP() > 0 && ms.GetTopP() <= 1) {
		return invalid(field+".top_p", "%v is out of range (above 0, at most 1)", ms.GetTopP())
	}
	if ms.GetMaxOutputTokens() < 0 {
		return invalid(field+".max_output_tokens", "%d is negative (0 means the model's limit)", ms.GetMaxOutputTokens())
	}
	switch tc := ms.GetToolChoice(); tc.GetMode() {
	case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
		if tc.GetToolName() == "" {
			return invalid(field+".tool_choice.tool_name", "required with mode TOOL: the name of one of the run's tools")
		}
	case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED, agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO,
		agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		if tc.GetToolName() != "" {
			return invalid(field+".tool_choice.tool_name", "only with mode TOOL")
		}
	default:
		return invalid(field+".tool_choice.mode", "unknown mode %d", tc.GetMode())
	}
	if n := len(ms.GetStopSequences()); n > maxStopSequences {
		return invalid(field+".stop_sequences", "%d sequences exceed the limit of %d", n, maxStopSequences)
	}
	for i, seq := range ms.GetStopSequences() {
		if seq == "" || len(seq) > maxStopSequenceBytes {
			return invalid(fmt.Sprintf("%s.stop_sequences[%d]", field, i), "needs 1 to %d bytes", maxStopSequenceBytes)
		}
	}
	if po := ms.GetProviderOptions(); po != nil && proto.Size(po) > maxProviderOptionsBytes {
		return invalid(field+".provider_options", "%d bytes encoded exceed the limit of %d", proto.Size(po), maxProviderOptionsBytes)
	}
	return nil
}

// checkRunMetadata validates a run's metadata, or a filter on it, at
// field.
func checkRunMetadata(field string, md map[string]string) error {
	if len(md) > maxRunMetadata {
		return invalid(field, "%d entries exceed the limit of %d", len(md), maxRunMetadata)
	}
	for k, v := range md {
		if !madeOf(k, runMetadataKeyChars, maxRunMetadataKeyBytes) {
			return invalid(fmt.Sprintf("%s[%q]", field, truncate(k, 40)), "keys need 1 to %d bytes of [a-zA-Z0-9._:/-]", maxRunMetadataKeyBytes)
		}
		if len(v) > maxRunMetadataValueBytes {
			return invalid(fmt.Sprintf("%s[%q]", field, k), "%d bytes exceed the limit of %d for a value", len(v), maxRunMetadataValueBytes)
		}
	}
	return nil
}

// checkDuration validates an optional positive duration of at most a day.
func checkDuration(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return invalid(field, "%v", err)
	}
	if v := d.AsDuration(); v <= 0 || v > 24*time.Hour {
		return invalid(field, "%v is out of range (more than 0, at most 24h)", v)
	}
	return nil
}

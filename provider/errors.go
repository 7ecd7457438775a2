package provider

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// TimedOutPrefix starts the error message of a call that ended because the
// provider took too long (a first-byte or idle timeout, or a deadline): a
// failure the retry policy treats like a broken connection.
const TimedOutPrefix = "Request timed out: "

// ContextOverflowPrefix starts the error message of a call the provider
// refused because the prompt did not fit the model's context window, so a
// client (and compaction) can tell this failure from others at a glance.
const ContextOverflowPrefix = "Context overflow: "

// HTTPErrorMessage builds the error text of a failed HTTP call from its status
// and body: "<status> <type>: <provider message>". It understands the error
// shapes of Anthropic ({"type":"error","error":{"type","message"}}), OpenAI
// ({"error":{"message","type","code"}}) and Google ({"error":{"code",
// "message","status"}}), and falls back to the raw body. Context overflow
// gets ContextOverflowPrefix.
func HTTPErrorMessage(status int, body string) string {
	var shape struct {
		Error json.RawMessage `json:"error"`
		// Some compatible servers answer {"message": "..."} or {"detail": "..."}.
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	var kind, msg string
	if json.Unmarshal([]byte(body), &shape) == nil {
		var inner struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Status  string `json:"status"`
			Code    any    `json:"code"`
		}
		errObj := shape.Error
		if len(errObj) == 0 {
			// SDKs that unwrap "error" hand over the inner object.
			errObj = json.RawMessage(body)
		}
		if json.Unmarshal(errObj, &inner) == nil && inner.Message != "" {
			msg = inner.Message
			kind = inner.Type
			if kind == "" {
				kind = inner.Status
			}
			if kind == "" {
				if c, ok := inner.Code.(string); ok {
					kind = c
				}
			}
		} else if len(shape.Error) > 0 {
			var s string
			if json.Unmarshal(shape.Error, &s) == nil {
				msg = s
			}
		}
		if msg == "" {
			msg = shape.Message
		}
		if msg == "" {
			msg = shape.Detail
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(body)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(status))
	if kind != "" {
		b.WriteString(" " + kind)
	}
	b.WriteString(": " + msg)
	out := b.String()
	if overflowText(out) || status == http.StatusRequestEntityTooLarge {
		return ContextOverflowPrefix + out
	}
	return out
}

// RetryAfter reads how long a response asks the client to wait: the
// retry-after-ms header (OpenAI, Anthropic), then Retry-After as seconds or
// an HTTP date. It returns 0 when neither is present or parseable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// overflowPatterns are the wordings providers use for a prompt that does not
// fit the context window (pi's list). Like retryablePattern, compiled on
// the first failed call, not at every start of agentd.
var overflowPatterns = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)prompt is too long|input is too long for requested model|exceeds the context window|input token count.*exceeds the maximum|maximum prompt length is \d+|reduce the length of the messages|maximum context length is \d+ tokens|exceeds the limit of \d+|exceeds the available context size|greater than the context length|context window exceeds limit|exceeded model token limit|too large for model with \d+ maximum context length|model_context_window_exceeded|context[_ ]length[_ ]exceeded|too many tokens|token limit exceeded`)
})

func overflowText(s string) bool { return overflowPatterns().MatchString(s) }

// IsContextOverflow reports whether a call failed because its prompt did not
// fit, either by the provider's words or, for servers that silently
// truncate, by input usage larger than contextWindow (0 skips that check).
func IsContextOverflow(m *agentdv1.AssistantMessage, contextWindow int64) bool {
	if m == nil {
		return false
	}
	if m.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR {
		e := m.GetErrorMessage()
		if strings.HasPrefix(e, ContextOverflowPrefix) || overflowText(e) {
			return true
		}
	}
	if contextWindow > 0 && m.GetStopReason() == agentdv1.StopReason_STOP_REASON_STOP {
		return m.GetUsage().GetInput()+m.GetUsage().GetCacheRead() > contextWindow
	}
	return false
}

// retryablePattern is how failures worth repeating are worded (pi's list).
var retryablePattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)overloaded|rate.?limit|too many requests|429|500|502|503|504|529|service.?unavailable|server.?error|internal.?error|connection.?error|connection.?refused|connection.?reset|other side closed|fetch failed|upstream.?connect|reset before headers|terminated|retry delay|timed out|unexpected EOF`)
})

// IsRetryable reports whether a failed call is worth repeating unchanged:
// rate limits, overloaded or failing servers and broken connections, as pi
// decides; never a context overflow, which only compaction can fix.
func IsRetryable(m *agentdv1.AssistantMessage) bool {
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || m.GetErrorMessage() == "" {
		return false
	}
	if IsContextOverflow(m, 0) {
		return false
	}
	return retryablePattern().MatchString(m.GetErrorMessage())
}

// Redact removes every occurrence of secret from s, so that an SDK error
// that echoes a request (URL, headers) never leaks an API key into a
// transcript or a log.
func Redact(s, secret string) string {
	if len(secret) < 4 {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

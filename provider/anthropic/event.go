package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/agentd/agentd/provider"
)

// wireEvent is the union of the Messages stream events, reduced to the
// fields the adapter reads. Its json tags define how an event is read:
// decodeEvent's gjson reader follows them, and encoding/json uses them
// directly for the events that reader hands back.
type wireEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message struct {
		ID    string    `json:"id"`
		Usage wireUsage `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		Text      string `json:"text"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
		Data      string `json:"data"`
	} `json:"content_block"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage wireUsage `json:"usage"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (u wireUsage) apply(to *provider.TokenUsage) {
	if u.InputTokens > 0 {
		to.Input = u.InputTokens
	}
	if u.OutputTokens > 0 {
		to.Output = u.OutputTokens
	}
	if u.CacheReadInputTokens > 0 {
		to.CacheRead = u.CacheReadInputTokens
	}
	if u.CacheCreationInputTokens > 0 {
		to.CacheWrite = u.CacheCreationInputTokens
	}
	to.Total = to.Input + to.Output + to.CacheRead + to.CacheWrite
}

// maxFastEvent bounds the events read with gjson. encoding/json refuses
// nesting deeper than 10,000 levels, which takes more bytes than this, so
// only longer events (rare: a long signature or tool input) could differ
// there; they take encoding/json.
const maxFastEvent = 10000

// decodeEvent fills ev from one event's JSON, exactly as
// json.Unmarshal(data, ev) would.
//
// encoding/json cost about 1 µs and 9 allocations per text delta, half the
// per-delta budget, so events are read with gjson in one pass and a single
// copy of the data. Whatever that reader cannot vouch to read as
// encoding/json does (invalid JSON or UTF-8, a field of another type, a key
// that matches a field only case-insensitively) is decoded again with
// encoding/json, so odd events give the same fields and the same error
// messages as before; real servers never send them.
func decodeEvent(data []byte, ev *wireEvent) error {
	if readEvent(data, ev) {
		return nil
	}
	*ev = wireEvent{}
	return json.Unmarshal(data, ev)
}

// readEvent is decodeEvent's gjson path. It reports false, leaving ev
// partly filled, for an event it cannot vouch to read as encoding/json does.
func readEvent(data []byte, ev *wireEvent) bool {
	*ev = wireEvent{}
	if len(data) > maxFastEvent || !utf8.Valid(data) {
		return false
	}
	// One copy per event: the strings gjson returns share it, and deltas
	// outlive the SSE decoder's buffer.
	js := string(data)
	return gjson.Valid(js) && readObject(gjson.Parse(js), ev.field)
}

func (ev *wireEvent) field(key string, v gjson.Result) bool {
	switch key {
	case "type":
		return readString(v, &ev.Type)
	case "index":
		return readInt(v, &ev.Index)
	case "message":
		return readObject(v, func(key string, v gjson.Result) bool {
			switch key {
			case "id":
				return readString(v, &ev.Message.ID)
			case "usage":
				return readObject(v, ev.Message.Usage.field)
			}
			return !foldsOnto(key, "id", "usage")
		})
	case "content_block":
		return readObject(v, ev.contentBlockField)
	case "delta":
		return readObject(v, ev.deltaField)
	case "usage":
		return readObject(v, ev.Usage.field)
	case "error":
		return readObject(v, func(key string, v gjson.Result) bool {
			switch key {
			case "type":
				return readString(v, &ev.Error.Type)
			case "message":
				return readString(v, &ev.Error.Message)
			}
			return !foldsOnto(key, "type", "message")
		})
	}
	return !foldsOnto(key, "type", "index", "message", "content_block", "delta", "usage", "error")
}

func (ev *wireEvent) contentBlockField(key string, v gjson.Result) bool {
	cb := &ev.ContentBlock
	switch key {
	case "type":
		return readString(v, &cb.Type)
	case "id":
		return readString(v, &cb.ID)
	case "name":
		return readString(v, &cb.Name)
	case "text":
		return readString(v, &cb.Text)
	case "thinking":
		return readString(v, &cb.Thinking)
	case "signature":
		return readString(v, &cb.Signature)
	case "data":
		return readString(v, &cb.Data)
	}
	return !foldsOnto(key, "type", "id", "name", "text", "thinking", "signature", "data")
}

func (ev *wireEvent) deltaField(key string, v gjson.Result) bool {
	d := &ev.Delta
	switch key {
	case "type":
		return readString(v, &d.Type)
	case "text":
		return readString(v, &d.Text)
	case "thinking":
		return readString(v, &d.Thinking)
	case "signature":
		return readString(v, &d.Signature)
	case "partial_json":
		return readString(v, &d.PartialJSON)
	case "stop_reason":
		return readString(v, &d.StopReason)
	}
	return !foldsOnto(key, "type", "text", "thinking", "signature", "partial_json", "stop_reason")
}

func (u *wireUsage) field(key string, v gjson.Result) bool {
	switch key {
	case "input_tokens":
		return readInt(v, &u.InputTokens)
	case "output_tokens":
		return readInt(v, &u.OutputTokens)
	case "cache_read_input_tokens":
		return readInt(v, &u.CacheReadInputTokens)
	case "cache_creation_input_tokens":
		return readInt(v, &u.CacheCreationInputTokens)
	}
	return !foldsOnto(key, "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
}

// The read helpers return false where encoding/json would report an error
// or might read the value differently. Like encoding/json, they leave the
// destination alone for null and let a repeated key overwrite (or, for an
// object, merge into) the earlier value.

func readObject(v gjson.Result, field func(key string, v gjson.Result) bool) bool {
	if v.Type == gjson.Null {
		return true
	}
	if !v.IsObject() {
		return false
	}
	ok := true
	v.ForEach(func(k, v gjson.Result) bool {
		ok = field(k.Str, v)
		return ok
	})
	return ok
}

func readString(v gjson.Result, dst *string) bool {
	switch v.Type {
	case gjson.Null:
		return true
	case gjson.String:
		if hasSurrogateEscape(v.Raw) {
			// gjson and encoding/json replace unpaired surrogates
			// differently; such a string takes encoding/json's reading.
			return json.Unmarshal([]byte(v.Raw), dst) == nil
		}
		*dst = v.Str
		return true
	}
	return false
}

func readInt[T int | int64](v gjson.Result, dst *T) bool {
	switch v.Type {
	case gjson.Null:
		return true
	case gjson.Number:
		// encoding/json takes only an integer literal that fits.
		n, err := strconv.ParseInt(v.Raw, 10, 64)
		if err != nil || int64(T(n)) != n {
			return false
		}
		*dst = T(n)
		return true
	}
	return false
}

// hasSurrogateEscape reports whether a raw JSON string may hold a \uD800 to
// \uDFFF escape. A false positive (an escaped backslash before "ud8") only
// costs the slower path.
func hasSurrogateEscape(raw string) bool {
	for {
		i := strings.Index(raw, `\u`)
		if i < 0 || i+3 >= len(raw) {
			return false
		}
		if (raw[i+2] == 'd' || raw[i+2] == 'D') && strings.IndexByte("89abcdefABCDEF", raw[i+3]) >= 0 {
			return true
		}
		raw = raw[i+2:]
	}
}

// foldsOnto reports whether encoding/json might match a key that is none of
// names exactly to one of them anyway: it also matches keys
// case-insensitively, with Unicode folding for non-ASCII letters.
func foldsOnto(key string, names ...string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return true
		}
	}
	return false
}

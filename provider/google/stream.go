package google

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"google.golang.org/genai"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// maxLine bounds one line of the event stream, as the SDK's scanner does
// (it allows 256 MiB); a chunk is a few hundred bytes, an inline image a
// few megabytes.
const maxLine = 256 << 20

func (p *Provider) run(ctx context.Context, e *provider.Emitter, model provider.Model, c *agentdv1.Context, opts provider.Options) {
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "request not sent", 0)
		return
	}
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	contents, cfg := BuildRequest(model, c, opts)
	x := &exchange{}
	defer x.close()
	s := streamState{e: e, p: p, x: x}
	// responseTap takes the body of a successful response, so the SDK's
	// iterator ends without a chunk; it yields only transport and HTTP
	// errors.
	for _, err := range p.client.Models.GenerateContentStream(context.WithValue(ctx, exchangeKey{}, x), model.ID, contents, cfg) {
		if err != nil {
			s.fail(ctx, err)
			return
		}
	}
	body := x.takeBody()
	if body == nil {
		e.FailOrAbort(ctx, "Stream error: the response had no body", 0)
		return
	}
	defer body.Close()
	s.consume(ctx, body)
}

// streamState follows the open block across chunks: Gemini sends whole
// parts, and consecutive text (or thought) parts continue one block.
type streamState struct {
	e       *provider.Emitter
	p       *Provider
	x       *exchange
	cur     int
	curKind byte // 't' text, 'r' thought, 0 none
	calls   int
	ids     map[string]bool
	reason  string
	message string
	// usage is the latest usageMetadata, read only when the call ends:
	// Gemini reports it cumulatively in every chunk, and decoding its
	// numbers each time cost a sixth of the per-delta budget.
	usage gjson.Result
}

// consume reads the events of a successful response until the stream
// ends, the consumer stops or a chunk fails the call.
func (s *streamState) consume(ctx context.Context, body io.Reader) {
	events := sseReader{r: bufio.NewReaderSize(body, 16<<10)}
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.settleUsage()
			s.e.FailOrAbort(ctx, provider.Redact("Stream error: "+err.Error(), s.p.cfg.APIKey), 0)
			return
		}
		// One copy per chunk: every string gjson returns shares it, and
		// deltas outlive the reader's buffer.
		if !s.chunk(ctx, string(data)) {
			return
		}
	}
	if ctx.Err() != nil {
		s.settleUsage()
		s.e.FailOrAbort(ctx, "stream ended", 0)
		return
	}
	s.finish(ctx)
}

// chunk maps one GenerateContentResponse onto the emitter; false means
// stop reading (the consumer left or the call failed).
func (s *streamState) chunk(ctx context.Context, js string) bool {
	e := s.e
	root := gjson.Parse(js)
	if !root.IsObject() || !gjson.Valid(js) {
		s.settleUsage()
		e.FailOrAbort(ctx, provider.Redact("Stream error: malformed chunk: "+js[:min(len(js), 200)], s.p.cfg.APIKey), 0)
		return false
	}
	var candidates, usage, feedback, apiErr gjson.Result
	var responseID string
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "candidates":
			candidates = v
		case "usageMetadata":
			usage = v
		case "promptFeedback":
			feedback = v
		case "responseId":
			responseID = v.Str
		case "error":
			apiErr = v
		}
		return true
	})
	if apiErr.IsObject() {
		// An error in the middle of a stream, shaped like an HTTP error body.
		var ae genai.APIError
		if err := json.Unmarshal([]byte(apiErr.Raw), &ae); err == nil {
			s.fail(ctx, ae)
			return false
		}
	}
	if e.ResponseID == "" {
		e.ResponseID = responseID
	}
	if !e.Start() {
		return false
	}
	if usage.IsObject() {
		s.usage = usage
	}
	if feedback.IsObject() {
		if reason := feedback.Get("blockReason").Str; reason != "" {
			msg := "Prompt blocked: " + reason
			if m := feedback.Get("blockReasonMessage").Str; m != "" {
				msg += ": " + m
			}
			s.settleUsage()
			e.EndAll()
			e.Fail(msg, 0)
			return false
		}
	}
	ok := true
	var reason, message string
	candidates.ForEach(func(_, cand gjson.Result) bool {
		cand.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "content":
				v.ForEach(func(k, v gjson.Result) bool {
					if k.Str == "parts" {
						v.ForEach(func(_, part gjson.Result) bool {
							ok = s.part(part)
							return ok
						})
					}
					return ok
				})
			case "finishReason":
				reason = v.Str
			case "finishMessage":
				message = v.Str
			}
			return ok
		})
		return false // only the first candidate
	})
	if ok && reason != "" {
		s.reason, s.message = reason, message
	}
	return ok
}

// settleUsage hands the latest usageMetadata to the emitter; every path
// that ends the call calls it first.
func (s *streamState) settleUsage() {
	u := s.usage
	if !u.Exists() {
		return
	}
	s.usage = gjson.Result{}
	var prompt, candidates, cached, thoughts, total int64
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "promptTokenCount":
			prompt = v.Int()
		case "candidatesTokenCount":
			candidates = v.Int()
		case "cachedContentTokenCount":
			cached = v.Int()
		case "thoughtsTokenCount":
			thoughts = v.Int()
		case "totalTokenCount":
			total = v.Int()
		}
		return true
	})
	s.e.Usage.CacheRead = cached
	s.e.Usage.Input = prompt - cached
	s.e.Usage.Output = candidates + thoughts
	s.e.Usage.Total = total
}

func (s *streamState) part(part gjson.Result) bool {
	var text, signature string
	var thought bool
	var call gjson.Result
	part.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "text":
			text = v.Str
		case "thought":
			thought = v.Bool()
		case "thoughtSignature":
			signature = v.Str
		case "functionCall":
			call = v
		}
		return true
	})
	e := s.e
	switch {
	case call.IsObject():
		if !s.closeCur() {
			return false
		}
		var id, name string
		args := "{}"
		call.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				id = v.Str
			case "name":
				name = v.Str
			case "args":
				if v.IsObject() {
					args = v.Raw
				}
			}
			return true
		})
		if id == "" || s.ids[id] {
			id = s.syntheticID(name)
		}
		if s.ids == nil {
			s.ids = map[string]bool{}
		}
		s.ids[id] = true
		s.calls++
		idx, ok := e.BeginToolCall(id, name)
		if !ok {
			return false
		}
		if signature != "" {
			e.SetThoughtSignature(idx, signature)
		}
		return e.Delta(idx, args) && e.End(idx)
	case text != "" || signature != "":
		kind := byte('t')
		if thought {
			kind = 'r'
		}
		if s.curKind != kind {
			if !s.closeCur() {
				return false
			}
			var ok bool
			if kind == 'r' {
				s.cur, ok = e.BeginThinking(false)
			} else {
				s.cur, ok = e.BeginText()
			}
			if !ok {
				return false
			}
			s.curKind = kind
		}
		if signature != "" {
			// The last signature of a run of parts is the one that counts.
			e.SetSignature(s.cur, signature)
		}
		return e.Delta(s.cur, text)
	}
	return true
}

func (s *streamState) closeCur() bool {
	ok := true
	if s.curKind != 0 {
		ok = s.e.End(s.cur)
	}
	s.curKind = 0
	return ok
}

// syntheticID derives a call id from the response id and the call's
// position, so the same wire stream always yields the same ids.
func (s *streamState) syntheticID(name string) string {
	h := fnv.New64a()
	h.Write([]byte(s.e.ResponseID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(s.calls)))
	return provider.NormalizeToolCallID(name+"_"+strconv.FormatUint(h.Sum64(), 36), API)
}

func (s *streamState) finish(ctx context.Context) {
	s.settleUsage()
	e := s.e
	if s.reason == "" {
		e.FailOrAbort(ctx, "Stream terminated before the response was complete", 0)
		return
	}
	stop, msg := StopReason(genai.FinishReason(s.reason), s.message)
	if msg != "" {
		e.EndAll()
		e.Fail(msg, 0)
		return
	}
	if s.calls > 0 && stop == agentdv1.StopReason_STOP_REASON_STOP {
		stop = agentdv1.StopReason_STOP_REASON_TOOL_USE
	}
	e.Done(stop)
}

// fail ends the call with an SDK error: an APIError becomes the provider's
// HTTP error message with the Retry-After the transport kept, anything
// else a stream error.
func (s *streamState) fail(ctx context.Context, err error) {
	s.settleUsage()
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) {
		var p *genai.APIError
		if errors.As(err, &p) {
			apiErr = *p
		} else {
			s.e.FailOrAbort(ctx, provider.Redact("Stream error: "+err.Error(), s.p.cfg.APIKey), 0)
			return
		}
	}
	body, _ := json.Marshal(map[string]any{"error": apiErr})
	ra := provider.RetryAfter(s.x.failedHeader(), s.p.cfg.Now())
	if ra == 0 {
		ra = retryInfoDelay(apiErr.Details)
	}
	code := apiErr.Code
	if code == 0 {
		code = http.StatusInternalServerError
	}
	s.e.FailOrAbort(ctx, provider.Redact(provider.HTTPErrorMessage(code, string(body)), s.p.cfg.APIKey), ra)
}

// retryInfoDelay reads google.rpc.RetryInfo.retryDelay ("2s", "1.5s"),
// Google's own way of saying Retry-After.
func retryInfoDelay(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.RetryInfo") {
			if s, ok := d["retryDelay"].(string); ok {
				if dur, err := time.ParseDuration(s); err == nil && dur > 0 {
					return dur
				}
			}
		}
	}
	return 0
}

// sseReader returns the data of each server-sent event. It follows the
// event-stream format: data lines of one event join with "\n", an empty
// line ends the event, comments and other fields are skipped. A bare JSON
// object line counts as data, since that is how an error can arrive.
type sseReader struct {
	r    *bufio.Reader
	data []byte
	long []byte
}

// next returns the data of the next event, valid until the following call,
// or io.EOF after the last one. An event cut off by the end of the stream
// is still returned; a read error discards it.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	has := false
	for {
		line, err := s.line()
		if errors.Is(err, io.EOF) && has {
			return s.data, nil
		}
		if err != nil {
			return nil, err
		}
		switch {
		case len(line) == 0:
			if has {
				return s.data, nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := line[len("data:"):]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			if has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, v...)
			has = true
		case line[0] == '{':
			if has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, line...)
			has = true
		}
	}
}

// line returns the next line without its terminator (LF, CRLF or a final
// unterminated line).
func (s *sseReader) line() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.long) > maxLine {
				return nil, fmt.Errorf("event stream line longer than %d bytes", maxLine)
			}
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err != nil && (!errors.Is(err, io.EOF) || len(line) == 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

package anthropic

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// decodeCases are events chosen to hit every place where a gjson reading
// could part from encoding/json's: decodeEvent must agree with
// json.Unmarshal on each, field for field and error for error.
var decodeCases = []struct {
	name, data string
	// fast: the event must stay on the gjson path.
	fast bool
}{
	{"text delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok1 "}}` + "\n", true},
	{"escapes", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\\\\\": \"\\n\\t\\/é\u00e9\"}"}}`, true},
	{"escaped key", `{"\u0074ype":"message_stop"}`, true},
	{"surrogate pair", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"\ud83d\ude00!"}}`, true},
	{"lone high surrogate before escape", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"a\ud800\u0041b"}}`, true},
	{"lone low surrogate", `{"delta":{"text":"\udc00x"}}`, true},
	{"escaped backslash before ud8", `{"delta":{"text":"\\ud800"}}`, true},
	{"hangul escape", `{"delta":{"text":"\ud55c"}}`, true},
	{"invalid utf8", "{\"delta\":{\"text\":\"a\xffb\"}}", false},
	{"message start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1,"service_tier":"standard","cache_creation":{"ephemeral_5m_input_tokens":0}}}}`, true},
	{"tool use start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`, true},
	{"redacted start", `{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwK"}}`, true},
	{"message delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`, true},
	{"error event", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true},
	{"nulls", `{"type":null,"index":null,"delta":null,"message":{"id":null,"usage":null},"usage":{"output_tokens":null}}`, true},
	{"duplicate keys merge", `{"delta":{"type":"text_delta"},"delta":{"text":"b"},"index":1,"index":2,"delta":null}`, true},
	{"case-folded top key", `{"Type":"message_stop"}`, false},
	{"case-folded nested key", `{"type":"content_block_delta","delta":{"TEXT":"x"}}`, false},
	{"exact and folded key", `{"type":"a","TYPE":"b"}`, false},
	{"kelvin sign key", `{"delta":{"type":"text_delta","text":"x"},"usage":{"output_\u212aokens":3}}`, false},
	{"long s key", `{"ſtop_reason":"x","delta":{"ſtop_reason":"end_turn"}}`, false},
	{"float index", `{"type":"content_block_stop","index":1.0}`, false},
	{"exponent tokens", `{"usage":{"output_tokens":1e3}}`, false},
	{"negative index", `{"type":"content_block_stop","index":-3}`, true},
	{"index overflow", `{"index":9223372036854775808}`, false},
	{"string index", `{"index":"1"}`, false},
	{"bool text", `{"delta":{"text":true}}`, false},
	{"object text", `{"delta":{"text":{"a":1}}}`, false},
	{"array delta", `{"type":"content_block_delta","delta":["text"]}`, false},
	{"string delta", `{"delta":"text"}`, false},
	{"top-level null", "null\n", true},
	{"top-level array", `[{"type":"message_stop"}]`, false},
	{"top-level string", `"message_stop"`, false},
	{"empty", "", false},
	{"whitespace", " \n", false},
	{"truncated", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"to`, false},
	{"trailing garbage", `{"type":"message_stop"} x`, false},
	{"two values", `{"type":"message_stop"}{"type":"error"}`, false},
	{"control char", "{\"delta\":{\"text\":\"a\tb\"}}", false},
	{"bad escape", `{"delta":{"text":"\x"}}`, false},
	{"leading plus", `{"index":+1}`, false},
	{"leading zero", `{"index":01}`, false},
	{"deep nesting", `{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, false},
	{"long text", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"` + strings.Repeat("ab", 6000) + `"}}`, false},
}

func TestDecodeEventMatchesEncodingJSON(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			assertSameDecoding(t, []byte(tc.data))
			var ev wireEvent
			if fast := readEvent([]byte(tc.data), &ev); fast != tc.fast {
				t.Fatalf("gjson path taken = %v, want %v", fast, tc.fast)
			}
		})
	}
}

// TestDecodeEventRecordedStreams checks every event of the recorded
// streams, and that they take the gjson path: a fallback would hide a
// reading the fast path gets wrong behind a slower correct one.
func TestDecodeEventRecordedStreams(t *testing.T) {
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("recorded streams: %v %v", files, err)
	}
	n := 0
	for _, f := range files {
		for _, data := range sseData(t, f) {
			assertSameDecoding(t, data)
			var ev wireEvent
			if !readEvent(data, &ev) {
				t.Errorf("%s: event left the gjson path: %s", f, data)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d events read from %v", n, files)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add([]byte(tc.data))
	}
	files, _ := filepath.Glob("testdata/*.sse")
	for _, file := range files {
		for _, data := range sseData(f, file) {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		assertSameDecoding(t, data)
	})
}

func assertSameDecoding(t *testing.T, data []byte) {
	t.Helper()
	var want wireEvent
	wantErr := json.Unmarshal(data, &want)
	// A used event must not leak into the next one.
	got := wireEvent{Type: "stale", Index: 7}
	got.Delta.Text = "stale"
	gotErr := decodeEvent(data, &got)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("error = %v, encoding/json says %v\ndata: %q", gotErr, wantErr, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nencoding/json\n%+v\ndata: %q", got, want, data)
	}
}

// sseData returns the data of each event in a recorded stream.
func sseData(tb testing.TB, path string) [][]byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, []byte(d))
		}
	}
	return out
}

package google

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		stream  string
		want    []string
		wantErr bool
	}{
		{"crlf events", "data: {\"a\":1}\r\n\r\ndata: {\"b\":2}\r\n\r\n", []string{`{"a":1}`, `{"b":2}`}, false},
		{"lf events", "data: {\"a\":1}\n\ndata:{\"b\":2}\n\n", []string{`{"a":1}`, `{"b":2}`}, false},
		{"multi-line data joins with newline", "data: {\"a\":\ndata: 1}\n\n", []string{"{\"a\":\n1}"}, false},
		{"comments and other fields skipped", ": keep-alive\nevent: chunk\nid: 7\ndata: {}\n\n\n\n", []string{`{}`}, false},
		{"unterminated last event", "data: {\"a\":1}\n\ndata: {\"b\"", []string{`{"a":1}`, `{"b"`}, false},
		{"bare json line is data", "{\"error\":{\"code\":500}}\n", []string{`{"error":{"code":500}}`}, false},
		{"line longer than the buffer", "data: \"" + long + "\"\r\n\r\n", []string{`"` + long + `"`}, false},
		{"empty stream", "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A 16-byte buffer (bufio's minimum) forces the long-line path.
			r := sseReader{r: bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(tt.stream)), 16)}
			var got []string
			for {
				data, err := r.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(data))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("events = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSSEReaderReadErrorDropsPartialEvent(t *testing.T) {
	broken := io.MultiReader(strings.NewReader("data: {\"a\":1}\n\ndata: {\"b\""), iotest.ErrReader(io.ErrUnexpectedEOF))
	r := sseReader{r: bufio.NewReader(broken)}
	if data, err := r.next(); err != nil || string(data) != `{"a":1}` {
		t.Fatalf("first = %q, %v", data, err)
	}
	if data, err := r.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("second = %q, %v; want the read error", data, err)
	}
}

package uistream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// part is one event of a projected stream, before its id is assigned.
type part struct {
	// data is the event's JSON payload.
	data any
	// open names what the part opens (a text block, a tool call, the run),
	// so a stream resumed while it is open can open it again; close names
	// what it closes.
	open, close string
	// final ends the HTTP response after it: the run finished, or it
	// waits for an answer the client resumes with.
	final bool
}

// cursor is a position in a projected stream: every part of every event
// before seq, and of seq the parts up to index n (all of them when whole).
type cursor struct {
	seq   uint64
	n     int
	whole bool
}

// parseCursor reads a Last-Event-ID; the empty string is the start.
func parseCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	seqText, nText, partial := strings.Cut(s, ".")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return cursor{}, fmt.Errorf("%q is not an id of this stream (<seq> or <seq>.<n>)", s)
	}
	if !partial {
		return cursor{seq: seq, whole: true}, nil
	}
	n, err := strconv.Atoi(nText)
	if err != nil || n < 0 {
		return cursor{}, fmt.Errorf("%q is not an id of this stream (<seq> or <seq>.<n>)", s)
	}
	return cursor{seq: seq, n: n}, nil
}

// covers reports whether part i of event seq is at or before c: the
// client has it.
func (c cursor) covers(seq uint64, i int) bool {
	if seq != c.seq {
		return seq < c.seq
	}
	return c.whole || i <= c.n
}

// eventID is the SSE id of part i of the n parts of event seq.
func eventID(seq uint64, i, n int) string {
	if i == n-1 {
		return strconv.FormatUint(seq, 10)
	}
	return strconv.FormatUint(seq, 10) + "." + strconv.Itoa(i)
}

// sseWriter writes server-sent events; its methods are safe for the
// stream's goroutine and the keepalive's.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	// open are the parts that opened what the client has open now, in
	// order, by what they opened: re-sent (without an id) when a resumed
	// stream starts inside them.
	open     []part
	resumed  bool
	started  bool
	header   func(http.Header)
	writeErr error
}

func newSSEWriter(w http.ResponseWriter, header func(http.Header)) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), header: header}
}

// start writes the response header once.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	if s.header != nil {
		s.header(h)
	}
	s.w.WriteHeader(http.StatusOK)
}

// track records what p opens and closes.
func (s *sseWriter) track(p part) {
	if p.close != "" {
		for i, o := range s.open {
			if o.open == p.close {
				s.open = append(s.open[:i], s.open[i+1:]...)
				break
			}
		}
	}
	if p.open != "" {
		s.open = append(s.open, p)
	}
}

// skip records a part the client has already.
func (s *sseWriter) skip(p part) { s.track(p) }

// send writes p with id; the first part after skipped ones is preceded by
// the parts that opened what is still open, so the client's parser sees
// each block opened before it continues.
func (s *sseWriter) send(p part, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start()
	if !s.resumed {
		s.resumed = true
		for _, o := range s.open {
			if err := s.write(o.data, ""); err != nil {
				return err
			}
		}
	}
	s.track(p)
	if err := s.write(p.data, id); err != nil {
		return err
	}
	return s.flush()
}

// raw writes a data line that is not JSON (the AI SDK's [DONE]).
func (s *sseWriter) raw(data string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start()
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return s.flush()
}

// keepalive writes an SSE comment, so idle proxies and clients keep the
// connection while a tool runs.
func (s *sseWriter) keepalive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil
	}
	if _, err := fmt.Fprint(s.w, ": keepalive\n\n"); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) write(data any, id string) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(s.w, "id: %s\n", id); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(s.w, "data: %s\n\n", b)
	return err
}

func (s *sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil && s.writeErr == nil {
		s.writeErr = err
	}
	return s.writeErr
}

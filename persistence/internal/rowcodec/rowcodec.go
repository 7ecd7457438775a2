// Package rowcodec encodes and decodes the payload columns that every
// engine of persistence stores the same way, so a row means the same in
// SQLite and PostgreSQL: entry payloads (entries.payload with
// entries.encoding) and event batches (run_events.payload with
// run_events.encoding). The formats are documented in the SQLite
// migrations 0002, 0003 and 0004 and in the PostgreSQL migration 0001,
// but for the compact event batch, documented in events.go.
package rowcodec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	// klauspost/compress writes and reads the same zlib format as the
	// standard library at about twice the speed (appends and loads).
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zlib"
	"google.golang.org/protobuf/encoding/protowire"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Values of the encoding columns of entries and run_events.
const (
	// EncodingProto: payload is the plain protobuf (of agentdv1.Entry, or
	// the length-delimited events of a batch).
	EncodingProto = 0
	// EncodingZlib: payload is that protobuf compressed as a zlib stream
	// (RFC 1950), chosen because every language's standard library or
	// zlib binding reads it.
	EncodingZlib = 1
)

const (
	// compressMinBytes is the smallest plain payload worth compressing:
	// about half a page, where rows start to waste page space (a ~4 KiB
	// tool result fills a leaf page alone or spills into a half-empty
	// overflow page). Go's DEFLATE has a high fixed cost for small inputs
	// (measured on this project's 2-core machine, level 1: ~27 µs for 1 KiB,
	// ~67 µs for 4 KiB), and it runs on the single writer, so compressing
	// the ~1 KiB assistant messages too (threshold 1024) made appends
	// ~6 µs slower on average for 0.05-0.07 less disk/jsonl.
	compressMinBytes = 2048
	// compressMaxRatio keeps a compressed payload only when it is at most
	// 7/8 of the plain one, so a read never pays for inflating what
	// barely shrank (already-compressed or random data).
	compressMaxRatioNum, compressMaxRatioDen = 7, 8
	// compressLevel favours speed: appends run one at a time on the
	// writer, and level 2 measured only ~3% smaller on Go source for
	// ~1.3x the time (HuffmanOnly: half the time, but 0.64 instead of
	// 0.45 of the size).
	compressLevel = flate.BestSpeed
	// maxInflatedPayload bounds what a compressed payload may inflate to,
	// so a damaged or hostile row cannot exhaust memory on read. No
	// sensible entry comes near it.
	maxInflatedPayload = 256 << 20
	// MaxPooledBuffer is the largest buffer a pooled encoder or inflater
	// keeps for its next use, so a rare huge payload is not pinned.
	MaxPooledBuffer = 1 << 20
)

// Encoder compresses payloads, reusing one zlib stream and buffer (a
// fresh DEFLATE compressor allocates ~1 MiB). The zero value compresses.
// Not safe for concurrent use.
type Encoder struct {
	// Off stores everything plain (compression disabled).
	Off   bool
	zw    *zlib.Writer
	out   bytes.Buffer
	plain []byte // EncodeEvents's plain payload
}

// Encode returns what to store for the plain protobuf pb and its
// encoding. The returned slice is valid until the next call.
func (p *Encoder) Encode(pb []byte) ([]byte, int64, error) {
	if p.Off || len(pb) < compressMinBytes {
		return pb, EncodingProto, nil
	}
	p.out.Reset()
	if p.zw == nil {
		zw, err := zlib.NewWriterLevel(&p.out, compressLevel)
		if err != nil {
			return nil, 0, err
		}
		p.zw = zw
	} else {
		p.zw.Reset(&p.out)
	}
	if _, err := p.zw.Write(pb); err != nil {
		return nil, 0, fmt.Errorf("compress payload: %w", err)
	}
	if err := p.zw.Close(); err != nil {
		return nil, 0, fmt.Errorf("compress payload: %w", err)
	}
	if p.out.Len()*compressMaxRatioDen > len(pb)*compressMaxRatioNum {
		return pb, EncodingProto, nil
	}
	return p.out.Bytes(), EncodingZlib, nil
}

// Trim drops the encoder's buffers when they grew beyond
// MaxPooledBuffer, before the encoder goes back to a pool.
func (p *Encoder) Trim() {
	if p.out.Cap() > MaxPooledBuffer {
		p.out = bytes.Buffer{}
	}
	if cap(p.plain) > MaxPooledBuffer {
		p.plain = nil
	}
}

// inflater is a reusable zlib reader with its output buffer; pooled
// because reads run concurrently and a fresh reader allocates ~40 KiB.
type inflater struct {
	src bytes.Reader
	zr  io.ReadCloser
	out bytes.Buffer
}

// inflaters is a cache, not state: any inflater serves any payload.
var inflaters = sync.Pool{New: func() any { return new(inflater) }}

// errPayloadTooLarge reports a payload that inflates beyond
// maxInflatedPayload.
var errPayloadTooLarge = fmt.Errorf("compressed payload inflates to more than %d bytes", maxInflatedPayload)

// WithPlain calls fn with the plain protobuf of a stored payload. The
// slice passed to fn is only valid during the call. A payload that does
// not inflate, or an unknown encoding, is an error for the caller to
// report as corruption.
func WithPlain(encoding int64, raw []byte, fn func(pb []byte) error) error {
	switch encoding {
	case EncodingProto:
		return fn(raw)
	case EncodingZlib:
	default:
		return fmt.Errorf("unknown payload encoding %d", encoding)
	}
	inf := inflaters.Get().(*inflater)
	defer inflaters.Put(inf)
	inf.src.Reset(raw)
	if inf.zr == nil {
		zr, err := zlib.NewReader(&inf.src)
		if err != nil {
			return fmt.Errorf("inflate payload: %w", err)
		}
		inf.zr = zr
	} else if err := inf.zr.(zlib.Resetter).Reset(&inf.src, nil); err != nil {
		return fmt.Errorf("inflate payload: %w", err)
	}
	inf.out.Reset()
	// A first guess at the size saves regrowing for typical ratios.
	inf.out.Grow(3 * len(raw))
	n, err := inf.out.ReadFrom(io.LimitReader(inf.zr, maxInflatedPayload+1))
	if err != nil {
		return fmt.Errorf("inflate payload: %w", err)
	}
	if n > maxInflatedPayload {
		return errPayloadTooLarge
	}
	if inf.src.Len() != 0 {
		return errors.New("inflate payload: trailing bytes after the zlib stream")
	}
	err = fn(inf.out.Bytes())
	if inf.out.Cap() > MaxPooledBuffer {
		inf.out = bytes.Buffer{}
	}
	return err
}

// Row is an entry row as an engine reads it, before decoding.
type Row struct {
	Seq      int64
	ID       string
	Parent   string
	Encoding int64
	Payload  []byte
}

// Decode decodes the row: its payload (inflated first when its encoding
// says so) must decode (see [persistence.DecodeEntry]) and name the row's
// id and parent. Anything else is a *[persistence.CorruptEntryError] naming
// the session, entry and seq.
func (r Row) Decode(sessionID string) (*agentdv1.Entry, error) {
	var e *agentdv1.Entry
	// DecodeEntry copies what it keeps, so the inflated bytes may be
	// reused.
	err := WithPlain(r.Encoding, r.Payload, func(pb []byte) error {
		var err error
		e, err = persistence.DecodeEntry(sessionID, r.Seq, r.ID, pb)
		return err
	})
	var ce *persistence.CorruptEntryError
	if err != nil && !errors.As(err, &ce) {
		return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: r.ID, Seq: r.Seq, Err: err}
	}
	if err != nil {
		return nil, err
	}
	if e.GetParentId() != r.Parent {
		return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: r.ID, Seq: r.Seq,
			Err: fmt.Errorf("payload names parent %q, the row %q", e.GetParentId(), r.Parent)}
	}
	return e, nil
}

// parallelDecodeMin is the fewest entries worth a decoding goroutine.
const parallelDecodeMin = 512

// DecodePath decodes the rows of a path in order, spread over the CPUs:
// decoding dominates loading a long transcript. The error is the first
// corrupt entry on the path.
func DecodePath(sessionID string, rows []Row) ([]*agentdv1.Entry, error) {
	out := make([]*agentdv1.Entry, len(rows))
	decode := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			e, err := rows[i].Decode(sessionID)
			if err != nil {
				return err
			}
			out[i] = e
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), (len(rows)+parallelDecodeMin-1)/parallelDecodeMin)
	if workers <= 1 {
		if err := decode(0, len(rows)); err != nil {
			return nil, err
		}
		return out, nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { errs[w] = decode(w*len(rows)/workers, (w+1)*len(rows)/workers) })
	}
	wg.Wait()
	// Chunks are in path order, so the first failing one holds the first
	// corrupt entry.
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AppendBatch decodes the stored batch of run runID that holds events
// first..last and appends to out those with a seq greater than after,
// until out holds limit events. A batch that does not inflate, does not
// parse or holds another number of events than its row says is an
// ErrCorrupt *[persistence.Error] naming the run. The events' Data share
// one copy of the plain payload, never raw.
func AppendBatch(out []persistence.Event, runID string, first, last uint64, encoding int64, raw []byte, after uint64, limit int) ([]persistence.Event, error) {
	var payload []byte
	// Events keep slices of the payload, which must outlive the pooled
	// inflater buffer and the caller's row buffer: copy it once.
	err := WithPlain(encoding, raw, func(pb []byte) error {
		payload = bytes.Clone(pb)
		return nil
	})
	if err != nil {
		return out, &persistence.Error{Kind: persistence.ErrCorrupt, RunID: runID, Detail: fmt.Sprintf("events %d to %d: %v", first, last, err)}
	}
	if isCompactBatch(payload) {
		return appendCompactBatch(out, runID, first, last, payload, after, limit)
	}
	seq := first
	for len(payload) > 0 && len(out) < limit {
		data, n := protowire.ConsumeBytes(payload)
		if n < 0 {
			return out, &persistence.Error{Kind: persistence.ErrCorrupt, RunID: runID, Detail: fmt.Sprintf("event %d: %v", seq, protowire.ParseError(n))}
		}
		payload = payload[n:]
		if seq > after {
			out = append(out, persistence.Event{Seq: seq, Data: data})
		}
		seq++
	}
	if len(out) < limit && seq != last+1 {
		return out, &persistence.Error{Kind: persistence.ErrCorrupt, RunID: runID, Detail: fmt.Sprintf("the batch of events %d to %d holds %d events", first, last, seq-first)}
	}
	return out, nil
}

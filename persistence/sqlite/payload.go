package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	// klauspost/compress writes and reads the same zlib format as the
	// standard library at about twice the speed (appends and loads).
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zlib"
)

// Values of entries.encoding (see migrations/0002_payload_encoding.sql).
const (
	// encodingProto: payload is the plain protobuf of agentdv1.Entry.
	encodingProto = 0
	// encodingZlib: payload is that protobuf compressed as a zlib stream
	// (RFC 1950), chosen because every language's standard library or
	// zlib binding reads it.
	encodingZlib = 1
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
	// maxPooledBuffer is the largest buffer a pooled encoder or inflater
	// keeps for its next use, so a rare huge payload is not pinned.
	maxPooledBuffer = 1 << 20
)

// payloadEncoder compresses payloads, reusing one zlib stream and buffer (a
// fresh DEFLATE compressor allocates ~1 MiB): the writer's for entries, and
// pooled ones for event batches. Not safe for concurrent use.
type payloadEncoder struct {
	off bool // store everything plain (WithPayloadCompression(false))
	zw  *zlib.Writer
	out bytes.Buffer
}

// encode returns what to store for the plain protobuf pb and its
// encoding. The returned slice is valid until the next call.
func (p *payloadEncoder) encode(pb []byte) ([]byte, int64, error) {
	if p.off || len(pb) < compressMinBytes {
		return pb, encodingProto, nil
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
		return pb, encodingProto, nil
	}
	return p.out.Bytes(), encodingZlib, nil
}

// inflater is a reusable zlib reader with its output buffer; pooled
// because reads run concurrently and a fresh reader allocates ~40 KiB.
type inflater struct {
	src bytes.Reader
	zr  io.ReadCloser
	out bytes.Buffer
}

var inflaters = sync.Pool{New: func() any { return new(inflater) }}

// errPayloadTooLarge reports a payload that inflates beyond
// maxInflatedPayload.
var errPayloadTooLarge = fmt.Errorf("compressed payload inflates to more than %d bytes", maxInflatedPayload)

// withPlainPayload calls fn with the plain protobuf of a stored payload.
// The slice passed to fn is only valid during the call. A payload that
// does not inflate, or an unknown encoding, is an error for the caller to
// report as corruption.
func withPlainPayload(encoding int64, raw []byte, fn func(pb []byte) error) error {
	switch encoding {
	case encodingProto:
		return fn(raw)
	case encodingZlib:
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
	if inf.out.Cap() > maxPooledBuffer {
		inf.out = bytes.Buffer{}
	}
	return err
}

package sqlite

import (
	"bytes"
	"context"

	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// InspectWriter runs single-value queries on the writer connection, so
// tests can check its pragmas.
func InspectWriter(ctx context.Context, s *Store, fn func(q func(query string, dst any) error) error) error {
	return fn(func(query string, dst any) error { return s.writer.conn.QueryRowContext(ctx, query).Scan(dst) })
}

// NewPayloadEncoder returns a function that stores pb as the store would:
// the bytes and the entries.encoding value. Lets benchmarks give raw
// SQLite the same rows. The function is not safe for concurrent use.
func NewPayloadEncoder() func(pb []byte) ([]byte, int64) {
	var enc rowcodec.Encoder
	return func(pb []byte) ([]byte, int64) {
		out, encoding, err := enc.Encode(pb)
		if err != nil {
			panic(err)
		}
		return bytes.Clone(out), encoding
	}
}

// WithPlainPayload calls fn with the plain protobuf of a stored payload,
// as the store's reads do.
func WithPlainPayload(encoding int64, raw []byte, fn func(pb []byte) error) error {
	return rowcodec.WithPlain(encoding, raw, fn)
}

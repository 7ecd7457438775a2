package sqlite

import "context"

// InspectWriter runs single-value queries on the writer connection, so
// tests can check its pragmas.
func InspectWriter(ctx context.Context, s *Store, fn func(q func(query string, dst any) error) error) error {
	return fn(func(query string, dst any) error { return s.writer.QueryRowContext(ctx, query).Scan(dst) })
}

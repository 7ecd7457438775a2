package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc/metadata"
)

// BenchmarkAuthenticate is the credential check alone, per call: the
// bearer token read from the metadata, hashed and looked up among 1,000.
func BenchmarkAuthenticate(b *testing.B) {
	cfg := &AuthConfig{}
	for i := range 1000 {
		sum := sha256.Sum256([]byte(fmt.Sprintf("token-%d", i)))
		cfg.Tokens = append(cfg.Tokens, TokenGrant{SHA256: hex.EncodeToString(sum[:]), Tenant: fmt.Sprintf("t%d", i), Role: RoleUser})
	}
	a := newAuthenticator(cfg, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer token-500"))
	for b.Loop() {
		got, err := a.authenticate(ctx)
		if err != nil || CallerFrom(got).Tenant != "t500" {
			b.Fatal(err)
		}
	}
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// selfSigned writes a certificate for "localhost" and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestRunServesTLSWithBearerAuth(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	sock := filepath.Join(dir, "agentd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "unix://" + sock, "--db", filepath.Join(dir, "a.db"),
			"--tls-cert", certFile, "--tls-key", keyFile}, env(map[string]string{"AGENTD_AUTH_TOKEN": "t0ken"}), io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("health over TLS: %v", err)
	}
	client := agentdv1.NewAgentServiceClient(conn)
	if _, err := client.ListModels(cctx, &agentdv1.ListModelsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer t0ken")
	models, err := client.ListModels(authed, &agentdv1.ListModelsRequest{})
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if len(models.GetModels()) < 2 || models.GetModels()[0].GetRef().GetProvider() != "faux" {
		t.Fatalf("ListModels lists the faux model and the catalog: %v", models.GetModels()[:1])
	}
}

func TestParseConfigRejectsHalfTLS(t *testing.T) {
	if _, err := parseConfig([]string{"--tls-cert", "c.pem"}, env(nil), io.Discard); err == nil {
		t.Fatal("--tls-cert without --tls-key accepted")
	}
}

// clientCA writes a CA certificate and returns a client certificate it
// signed for subject.
func clientCA(t *testing.T, dir string, subject pkix.Name) (caFile string, client tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, subject.CommonName+"-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// With --tls-client-ca and --auth-config, a verified client certificate
// is its subject's tenant; a bearer token still works beside it; a
// certificate of another CA is refused at the handshake.
func TestMutualTLSMapsCertificatesToTenants(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	caFile, billing := clientCA(t, dir, pkix.Name{CommonName: "billing", Organization: []string{"Acme"}})
	_, stranger := clientCA(t, dir, pkix.Name{CommonName: "billing-impostor", Organization: []string{"Acme"}})
	authFile := filepath.Join(dir, "auth.json")
	sum := sha256.Sum256([]byte("globex-token"))
	if err := os.WriteFile(authFile, []byte(`{"certificates": [{"subject": "CN=billing,O=Acme", "tenant": "acme", "role": "user"}],
		"tokens": [{"sha256": "`+hex.EncodeToString(sum[:])+`", "tenant": "globex", "role": "user"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agentd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "unix://" + sock, "--db", filepath.Join(dir, "a.db"),
			"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--auth-config", authFile}, env(nil), io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	dial := func(certs ...tls.Certificate) agentdv1.AgentServiceClient {
		creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12, Certificates: certs})
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return agentdv1.NewAgentServiceClient(conn)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	acme := dial(billing)
	var created *agentdv1.CreateSessionResponse
	var err error
	for { // agentd may still be starting
		created, err = acme.CreateSession(cctx, &agentdv1.CreateSessionRequest{Title: "acme's"}, grpc.WaitForReady(true))
		if status.Code(err) != codes.Unavailable || cctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("CreateSession with the client certificate: %v", err)
	}
	globex := dial()
	gctx := metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer globex-token")
	if _, err := globex.GetSession(gctx, &agentdv1.GetSessionRequest{SessionId: created.GetSession().GetId()}); status.Code(err) != codes.NotFound {
		t.Errorf("globex reads acme's session: %v, want NOT_FOUND", err)
	}
	list, err := acme.ListSessions(cctx, &agentdv1.ListSessionsRequest{})
	if err != nil || len(list.GetSessions()) != 1 {
		t.Errorf("acme lists %v, %v", list.GetSessions(), err)
	}
	if _, err := dial(stranger).ListSessions(cctx, &agentdv1.ListSessionsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("a certificate of another CA: %v, want the handshake refused (UNAVAILABLE)", err)
	}
}

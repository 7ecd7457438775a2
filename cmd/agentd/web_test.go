package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var webLine = regexp.MustCompile(`msg="http serving[^"]*" addr=(\S+)`)

// startWeb starts agentd with --http-listen on a free port, auth and
// args, and returns the process and the HTTP base URL.
func startWeb(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	p := startProc(t, filepath.Join(t.TempDir(), "a.db"), append([]string{"--http-listen", "127.0.0.1:0", "--auth-token", "secret"}, args...)...)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := webLine.FindStringSubmatch(p.log.String()); m != nil {
			return p, "http://" + m[1]
		}
	}
	t.Fatalf("no HTTP address logged:\n%s", p.log.String())
	return nil, ""
}

// A listed origin gets the CORS headers a browser client needs, the
// preflight included, and can read grpc-status and Connect's headers; an
// unlisted one gets none, so the browser keeps its page out.
func TestCORSOrigins(t *testing.T) {
	_, base := startWeb(t, "--cors-origins", "http://app.example, https://other.example:8443")
	for _, tc := range []struct {
		origin string
		listed bool
	}{{"http://app.example", true}, {"https://other.example:8443", true}, {"http://evil.example", false}} {
		t.Run(tc.origin, func(t *testing.T) {
			pre, _ := http.NewRequest(http.MethodOptions, base+"/agentd.v1.AgentService/ListSessions", nil)
			pre.Header.Set("Origin", tc.origin)
			pre.Header.Set("Access-Control-Request-Method", "POST")
			pre.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type") // sorted, as browsers send them
			resp, err := http.DefaultClient.Do(pre)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			allowed := resp.Header.Get("Access-Control-Allow-Origin")
			if tc.listed != (allowed == tc.origin) {
				t.Fatalf("preflight Access-Control-Allow-Origin %q (listed %v)", allowed, tc.listed)
			}
			if tc.listed && !strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
				t.Errorf("preflight allows headers %q, want authorization among them", resp.Header.Get("Access-Control-Allow-Headers"))
			}

			req, _ := http.NewRequest(http.MethodPost, base+"/agentd.v1.AgentService/ListSessions", strings.NewReader("{}"))
			req.Header.Set("Origin", tc.origin)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("Authorization", "Bearer secret")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("Connect ListSessions: HTTP %d", resp.StatusCode)
			}
			exposed := strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers"))
			if !tc.listed {
				if resp.Header.Get("Access-Control-Allow-Origin") != "" || exposed != "" {
					t.Fatalf("an unlisted origin got CORS headers: %v", resp.Header)
				}
				return
			}
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tc.origin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tc.origin)
			}
			for _, h := range []string{"grpc-status", "grpc-message", "grpc-status-details-bin", "connect-content-encoding"} {
				if !strings.Contains(exposed, h) {
					t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
				}
			}
		})
	}
}

// Without --cors-origins no origin gets CORS headers.
func TestCORSOffByDefault(t *testing.T) {
	_, base := startWeb(t)
	req, _ := http.NewRequest(http.MethodOptions, base+"/agentd.v1.AgentService/ListSessions", nil)
	req.Header.Set("Origin", "http://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("Access-Control-Allow-Origin %q without --cors-origins", got)
	}
}

// buf curl, a client of its own, speaks Connect and gRPC-Web to
// --http-listen, learning the API from agentd's reflection (with HTTP/2)
// or from the descriptors agentd embeds, with the bearer token.
func TestBufCurlConnectAndGRPCWeb(t *testing.T) {
	buf, err := filepath.Abs("../../node_modules/.bin/buf")
	if err != nil {
		t.Fatal(err)
	}
	_, base := startWeb(t)
	curl := func(args ...string) (string, error) {
		out, err := exec.Command(buf, append([]string{"curl", "-H", "Authorization: Bearer secret"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"connect, reflection", []string{"--protocol", "connect"}},
		{"connect, schema", []string{"--protocol", "connect", "--schema", "../../service/apidoc/agentd.binpb"}},
		{"grpcweb, reflection over HTTP/2", []string{"--protocol", "grpcweb", "--http2-prior-knowledge"}},
		{"grpcweb, schema", []string{"--protocol", "grpcweb", "--schema", "../../service/apidoc/agentd.binpb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := curl(append(tc.args, "-d", `{"title":"by buf curl","config":{"faux":{"echo":true}}}`, base+"/agentd.v1.AgentService/CreateSession")...)
			if err != nil {
				t.Fatalf("CreateSession: %v\n%s", err, out)
			}
			var created struct{ Session struct{ ID, Title string } }
			if err := json.Unmarshal([]byte(out), &created); err != nil || created.Session.ID == "" || created.Session.Title != "by buf curl" {
				t.Fatalf("CreateSession answered %s (%v)", out, err)
			}
			out, err = curl(append(tc.args, "-d", `{"session_id":"`+created.Session.ID+`","content":[{"text":{"text":"hi"}}]}`, base+"/agentd.v1.AgentService/Prompt")...)
			if err != nil || !strings.Contains(out, `"agentEnd"`) {
				t.Fatalf("Prompt streamed no agentEnd (%v):\n%s", err, out)
			}
			out, err = curl(append(tc.args, "-d", `{"session_id":"nope"}`, base+"/agentd.v1.AgentService/GetSession")...)
			if err == nil || !strings.Contains(out, `"not_found"`) || !strings.Contains(out, "google.rpc.ErrorInfo") {
				t.Fatalf("GetSession of an unknown id: %v\n%s", err, out)
			}
		})
	}
	// Without the token the call is refused as on gRPC.
	out, err := exec.Command(buf, "curl", "--protocol", "connect", "--schema", "../../service/apidoc/agentd.binpb", "-d", "{}", base+"/agentd.v1.AgentService/ListSessions").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"unauthenticated"`) {
		t.Fatalf("ListSessions without a token: %v\n%s", err, out)
	}
}

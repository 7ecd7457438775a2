package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd/service/console"
)

// serve mounts the console beside a stand-in for the transcoder, as
// agentd's HTTP listener does.
func serve(t *testing.T) *httptest.Server {
	t.Helper()
	ui, err := console.NewHandler()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Handler", "api")
		http.NotFound(w, r)
	}))
	for pattern, h := range ui.Mounts() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// The page and its files are served with a policy that loads nothing from
// elsewhere and forbids framing; an unknown file is 404, never the page;
// "/" leads to the console; API paths stay the transcoder's.
func TestConsoleFiles(t *testing.T) {
	srv := serve(t)
	tests := []struct {
		method, path string
		status       int
		contentType  string
		body         string
		handler      string
	}{
		{"GET", "/ui/", 200, "text/html; charset=utf-8", "<title>agentd console</title>", ""},
		{"GET", "/ui/index.html", 200, "text/html; charset=utf-8", `<script type="module" src="console.js">`, ""},
		{"GET", "/ui/console.js", 200, "text/javascript; charset=utf-8", "", ""},
		{"GET", "/ui/console.css", 200, "text/css; charset=utf-8", ":root", ""},
		{"HEAD", "/ui/", 200, "text/html; charset=utf-8", "", ""},
		{"GET", "/ui/no-such-file.js", 404, "", "", ""},
		{"GET", "/ui/static/index.html", 404, "", "", ""},
		{"POST", "/ui/", 404, "", "", "api"},
		{"GET", "/agentd.v1.AgentService/ListSessions", 404, "", "", "api"},
		{"GET", "/v1/sessions", 404, "", "", "api"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		res, err := noRedirects().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, res.StatusCode, tt.status)
			continue
		}
		if got := res.Header.Get("X-Handler"); got != tt.handler {
			t.Errorf("%s %s: served by %q, want %q", tt.method, tt.path, got, tt.handler)
		}
		if tt.status != 200 {
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tt.contentType {
			t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, got, tt.contentType)
		}
		if !strings.Contains(string(body), tt.body) {
			t.Errorf("%s %s: body lacks %q", tt.method, tt.path, tt.body)
		}
		if tt.method == "HEAD" && len(body) != 0 {
			t.Errorf("HEAD %s sent a body", tt.path)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s %s: Content-Security-Policy %q lacks %q", tt.method, tt.path, csp, want)
			}
		}
		if res.Header.Get("X-Frame-Options") != "DENY" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: headers %v", tt.method, tt.path, res.Header)
		}
	}

	res, err := noRedirects().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != console.Path {
		t.Errorf("GET /: %d to %q, want a redirect to %s", res.StatusCode, res.Header.Get("Location"), console.Path)
	}
}

// A page reloaded with the ETag it has is answered 304, without a body;
// a stale ETag gets the file.
func TestConsoleRevalidates(t *testing.T) {
	srv := serve(t)
	res, err := http.Get(srv.URL + "/ui/console.js")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	etag := res.Header.Get("ETag")
	if etag == "" || res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, res.Header.Get("Cache-Control"))
	}
	for _, tt := range []struct {
		etag   string
		status int
	}{{etag, http.StatusNotModified}, {`"stale"`, http.StatusOK}} {
		req, _ := http.NewRequest("GET", srv.URL+"/ui/console.js", nil)
		req.Header.Set("If-None-Match", tt.etag)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.status || (tt.status == http.StatusNotModified && len(body) != 0) {
			t.Errorf("If-None-Match %s: %d with %d bytes, want %d", tt.etag, res.StatusCode, len(body), tt.status)
		}
	}
}

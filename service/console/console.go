// Package console serves agentd's web console: static files embedded in the
// binary (built from clients/ts/console with the TypeScript client over
// Connect), mounted on the --http-listen listener beside the protocols the
// page calls. The page holds no secret and no state of its own beyond the
// browser tab: every action is an AgentService call, authenticated,
// tenant-scoped and refused exactly as from any other client.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Path is where the console is mounted; "/" redirects to it.
const Path = "/ui/"

//go:embed static
var static embed.FS

// contentSecurityPolicy lets the page load only its own script and style
// and call only its own origin, and forbids framing: an approval dialog
// inside another site's frame could be clicked through (clickjacking).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// file is one embedded file, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console's files under [Path] and redirects "/" there.
type Handler struct {
	files map[string]file
}

// NewHandler reads the embedded files.
func NewHandler() (*Handler, error) {
	h := &Handler{files: map[string]file{}}
	err := fs.WalkDir(static, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.files[strings.TrimPrefix(name, "static/")] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the console's embedded files: %w", err)
	}
	if _, ok := h.files["index.html"]; !ok {
		return nil, fmt.Errorf("the console's embedded files lack index.html")
	}
	return h, nil
}

// Mounts are the patterns to mount h at, as service.WebOptions.Mounts
// takes them: the console's files, and "/" (exactly) redirecting to them.
func (h *Handler) Mounts() map[string]http.Handler {
	return map[string]http.Handler{
		"GET " + Path: h, // GET patterns take HEAD too
		"GET /{$}":    http.RedirectHandler(Path, http.StatusFound),
	}
}

// ServeHTTP serves one file; an unknown name is 404, never index.html, so
// a mistyped API path is not answered with a page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Path)
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	// Revalidated on every load, so a new agentd never runs an old page.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", fmt.Sprint(len(f.body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(f.body)
}

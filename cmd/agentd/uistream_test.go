package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

var httpLine = regexp.MustCompile(`msg="http serving[^"]*" addr=(\S+)`)

// uiEvent is one server-sent event of a UI stream.
type uiEvent struct{ id, data string }

func (e uiEvent) typ() string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(e.data), &v)
	return v.Type
}

// TestUIStreamResumesAfterKillAndRestart: an AI SDK stream cut by a
// SIGKILL of agentd resumes, on the restarted agentd, exactly after the
// Last-Event-ID the client had, from the durable event log, and ends
// with the run's outcome.
func TestUIStreamResumesAfterKillAndRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	p := startProc(t, db, "--http-listen", "127.0.0.1:0")
	answer := &agentdv1.AssistantMessage{Content: texts(strings.Repeat("the default port is 3000. ", 200))}
	session := createSession(t, p.client(), &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{answer}, TokensPerSecond: 200}})
	body := `{"sessionId":"` + session + `","text":"port?","requestId":"ui-kill"}`
	post := func(p *proc, lastID string) *http.Response {
		t.Helper()
		m := httpLine.FindStringSubmatch(p.log.String())
		if m == nil {
			t.Fatalf("agentd did not log its HTTP address:\n%s", p.log.String())
		}
		req, err := http.NewRequestWithContext(testCtx(t), "POST", "http://"+m[1]+"/v1/ui/aisdk", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST: %s", resp.Status)
		}
		return resp
	}
	read := func(resp *http.Response, until func([]uiEvent) bool) []uiEvent {
		var out []uiEvent
		var cur uiEvent
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && (until == nil || !until(out)) {
			line := sc.Text()
			switch {
			case line == "" && cur.data != "":
				out = append(out, cur)
				cur = uiEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
		return out
	}

	var firstDelta time.Time
	live := read(post(p, ""), func(evs []uiEvent) bool {
		if firstDelta.IsZero() && len(evs) > 0 && evs[len(evs)-1].typ() == "text-delta" {
			firstDelta = time.Now()
		}
		return !firstDelta.IsZero() && time.Since(firstDelta) > time.Second
	})
	p.kill()
	// The client's last id: the first delta, which streamed a second
	// before the kill and so was stored in a batch.
	k := slices.IndexFunc(live, func(e uiEvent) bool { return e.typ() == "text-delta" })
	if k < 0 || k+1 >= len(live) {
		t.Fatalf("no delta followed by more events in %d live events", len(live))
	}

	p = startProc(t, db, "--http-listen", "127.0.0.1:0")
	resumed := read(post(p, live[k].id), nil)
	var reopened, rest []uiEvent
	for _, e := range resumed {
		if e.id == "" && len(rest) == 0 {
			reopened = append(reopened, e)
		} else {
			rest = append(rest, e)
		}
	}
	var types []string
	for _, e := range reopened {
		types = append(types, e.typ())
	}
	if !slices.Equal(types, []string{"start", "start-step", "text-start"}) {
		t.Errorf("re-opened %v, want start, start-step, text-start", types)
	}
	if len(rest) == 0 || rest[0] != live[k+1] {
		t.Fatalf("after %s the restarted agentd sent %v first, want %v", live[k].id, rest[:min(1, len(rest))], live[k+1])
	}
	end := rest[len(rest)-2]
	if rest[len(rest)-1].data != "[DONE]" || end.typ() != "finish" || !strings.Contains(end.data, `"outcome":"RUN_OUTCOME_INTERRUPTED"`) {
		t.Fatalf("the resumed stream ends with %v, %v; want finish with RUN_OUTCOME_INTERRUPTED, then [DONE]", end, rest[len(rest)-1])
	}
}

package mcptest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPServer is a streamable-HTTP MCP server written with the SDK, served
// on loopback for the test: a "slow" tool that waits the given seconds or
// until its request is cancelled, and a "fail" tool whose result is an
// error result ("the disk is full"). Add tools to Server to announce a
// tools/list_changed.
type HTTPServer struct {
	Server *mcpsdk.Server
	URL    string
	// Cancelled receives one value each time a slow call sees its request
	// cancelled.
	Cancelled chan struct{}
	// Headers receives the Authorization header of requests (when there is
	// room).
	Headers chan string
}

// NewHTTPServer starts an HTTPServer, stopped when the test ends.
func NewHTTPServer(t testing.TB) *HTTPServer {
	t.Helper()
	hs := &HTTPServer{Cancelled: make(chan struct{}, 16), Headers: make(chan string, 16)}
	hs.Server = mcpsdk.NewServer(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil)
	type slowArgs struct {
		Seconds float64 `json:"seconds"`
	}
	mcpsdk.AddTool(hs.Server, &mcpsdk.Tool{Name: "slow", Description: "Waits the given seconds."}, func(ctx context.Context, _ *mcpsdk.CallToolRequest, args slowArgs) (*mcpsdk.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
			hs.Cancelled <- struct{}{}
			return nil, nil, ctx.Err()
		case <-time.After(time.Duration(args.Seconds * float64(time.Second))):
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "done"}}}, nil, nil
		}
	})
	mcpsdk.AddTool(hs.Server, &mcpsdk.Tool{Name: "fail", Description: "Fails."}, func(context.Context, *mcpsdk.CallToolRequest, struct{}) (*mcpsdk.CallToolResult, any, error) {
		return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "the disk is full"}}}, nil, nil
	})
	handler := mcpsdk.NewStreamableHTTPHandler(func(r *http.Request) *mcpsdk.Server {
		select {
		case hs.Headers <- r.Header.Get("Authorization"):
		default:
		}
		return hs.Server
	}, nil)
	ts := httptest.NewServer(handler)
	t.Cleanup(ts.Close)
	hs.URL = ts.URL
	return hs
}

// AddTool adds a tool named name that answers "ok", which makes the server
// announce tools/list_changed to its clients.
func (hs *HTTPServer) AddTool(name string) {
	mcpsdk.AddTool(hs.Server, &mcpsdk.Tool{Name: name, Description: "Added later."}, func(context.Context, *mcpsdk.CallToolRequest, struct{}) (*mcpsdk.CallToolResult, any, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil, nil
	})
}

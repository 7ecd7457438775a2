package transcriptgen

import (
	"context"
	"fmt"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// sessionStore is what FillSessions writes to: any persistence.Store.
type sessionStore interface {
	CreateSession(ctx context.Context, p persistence.CreateSessionParams) (*persistence.Session, error)
	Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error
}

// FillSessions creates n sessions in st, titled "session <i>", each
// holding one user message: the many small conversations of a database
// that start-up benchmarks open.
func FillSessions(ctx context.Context, st sessionStore, n int) error {
	for i := range n {
		s, err := st.CreateSession(ctx, persistence.CreateSessionParams{Title: fmt.Sprint("session ", i)})
		if err != nil {
			return err
		}
		hello := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{
			Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{textBlock("hello")}}}}}}
		if err := st.Append(ctx, s.ID, hello); err != nil {
			return err
		}
	}
	return nil
}

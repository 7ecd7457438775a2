package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// ExportSession sends a session as records: its header, then every entry
// of its tree in append order.
func (a *Agent) ExportSession(ctx context.Context, sessionID string, send func(*agentdv1.SessionRecord) error) error {
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	// Every page first, so the header's count is true even when a run
	// appends meanwhile: the export holds the entries that existed when it
	// began.
	var entries []*agentdv1.Entry
	token := ""
	for {
		page, err := a.store.Entries(ctx, sessionID, persistence.EntriesRequest{PageSize: persistence.MaxPageSize, PageToken: token})
		if err != nil {
			return err
		}
		entries = append(entries, page.Entries...)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	header := &agentdv1.SessionHeader{Config: sess.Config, Title: sess.Title, Labels: sess.Labels, LeafEntryId: sess.LeafEntryID,
		SchemaVersion: int32(a.opts.SchemaVersion), EntryCount: int64(len(entries))}
	if err := send(&agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Header{Header: header}}); err != nil {
		return err
	}
	for _, e := range entries {
		if err := send(&agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Entry{Entry: e}}); err != nil {
			return err
		}
	}
	return nil
}

// ImportSession creates a session from an exported header and its entries,
// read with next until io.EOF: identical entries with identical ids, the
// same leaf. Check the header's configuration with CheckConfig first. An
// entry whose parent did not come before it, a repeated id, or a leaf that
// is not an imported entry is a *FieldError, and no session is left.
func (a *Agent) ImportSession(ctx context.Context, tenant string, header *agentdv1.SessionHeader, next func() (*agentdv1.Entry, error)) (*persistence.Session, error) {
	sess, err := a.store.CreateSession(ctx, persistence.CreateSessionParams{Title: header.GetTitle(), Labels: header.GetLabels(), Config: header.GetConfig(), Tenant: tenant})
	if err != nil {
		return nil, err
	}
	imported, err := a.importEntries(ctx, sess.ID, header, next)
	if err != nil {
		if derr := a.store.DeleteSession(context.WithoutCancel(ctx), sess.ID); derr != nil {
			a.opts.Logger.ErrorContext(ctx, "could not delete a failed import", "session", sess.ID, "err", derr)
		}
		return nil, err
	}
	if err := a.store.SetLeaf(ctx, sess.ID, header.GetLeafEntryId()); err != nil {
		return nil, err
	}
	if header.GetEntryCount() != 0 && header.GetEntryCount() != int64(imported) {
		a.opts.Logger.WarnContext(ctx, "an import held another number of entries than its header said", "session", sess.ID,
			"header", header.GetEntryCount(), "imported", imported)
	}
	return a.created(a.store.GetSession(ctx, sess.ID))
}

// importEntries appends the entries next yields, chains of parent and
// child in one append each.
func (a *Agent) importEntries(ctx context.Context, sessionID string, header *agentdv1.SessionHeader, next func() (*agentdv1.Entry, error)) (int, error) {
	seen := map[string]bool{}
	var chain []*agentdv1.Entry
	flush := func() error {
		if len(chain) == 0 {
			return nil
		}
		if chain[0].GetParentId() == "" {
			// A root: nothing above it, whatever the leaf is now.
			if err := a.store.SetLeaf(ctx, sessionID, ""); err != nil {
				return err
			}
		}
		err := a.appendEntries(ctx, a.store, sessionID, chain...)
		chain = nil
		return err
	}
	n := 0
	for {
		e, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, err
		}
		field := fmt.Sprintf("records[%d].entry", n+1)
		switch {
		case e.GetId() == "":
			return n, invalid(field+".id", "required: an imported entry keeps its id")
		case seen[e.GetId()]:
			return n, invalid(field+".id", "%q comes twice", truncate(e.GetId(), 70))
		case e.GetParentId() != "" && !seen[e.GetParentId()]:
			return n, invalid(field+".parent_id", "%q did not come before entry %q; export entries in append order", truncate(e.GetParentId(), 70), truncate(e.GetId(), 70))
		case e.GetPayload() == nil:
			return n, invalid(field, "entry %q holds nothing", truncate(e.GetId(), 70))
		}
		seen[e.GetId()] = true
		if len(chain) > 0 && e.GetParentId() != chain[len(chain)-1].GetId() {
			if err := flush(); err != nil {
				return n, err
			}
		}
		chain = append(chain, e)
		n++
		if len(chain) >= persistence.MaxPageSize {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := flush(); err != nil {
		return n, err
	}
	if leaf := header.GetLeafEntryId(); leaf != "" && !seen[leaf] {
		return n, invalid("records[0].header.leaf_entry_id", "%q is not one of the imported entries", truncate(leaf, 70))
	}
	return n, nil
}

package persistence

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Page tokens are opaque to callers. Each is bound to the listing that
// issued it (which kind of list, and its scope: the session, or the filter
// of a session listing), so a token handed to another session or another
// filter is refused instead of silently paging through the wrong list.
//
// A token is base64url("<listing>:<scope hash>:<position>"); the hash is
// FNV-1a of the scope, which keeps tokens short whatever the scope is.

// EncodePageToken returns the token for position in the listing named
// listing with the given scope.
func EncodePageToken(listing, scope string, position int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(listing + ":" + scopeHash(scope) + ":" + strconv.FormatInt(position, 10)))
}

// DecodePageToken returns the position a token of the listing and scope
// points at. A token that is not one, or that another listing or scope
// issued, fails with ErrInvalid saying which.
func DecodePageToken(listing, scope, token string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	parts := strings.Split(string(raw), ":")
	if err != nil || len(parts) != 3 {
		return 0, &Error{Kind: ErrInvalid, Detail: fmt.Sprintf("page token %q is not a page token", truncate(token, 40))}
	}
	if parts[0] != listing || parts[1] != scopeHash(scope) {
		return 0, &Error{Kind: ErrInvalid, Detail: "the page token was issued for another listing (another session or filter); start again with an empty page token"}
	}
	n, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || n < 0 {
		return 0, &Error{Kind: ErrInvalid, Detail: fmt.Sprintf("page token %q is not a page token", truncate(token, 40))}
	}
	return n, nil
}

// scope binds a page token to the listing's filters.
func (r ListSessionsRequest) scope() string {
	tenant := "*"
	if !r.AllTenants {
		tenant = strconv.Quote(r.Tenant)
	}
	return LabelFilterScope(r.LabelFilter) + "origin=" + strconv.Quote(r.OriginSessionID) + ";tenant=" + tenant
}

// LabelFilterScope is the page token scope of a session listing with this
// label filter: the same filter in any key order gives the same scope.
func LabelFilterScope(filter map[string]string) string {
	keys := make([]string, 0, len(filter))
	for k := range filter {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Quote(k) + "=" + strconv.Quote(filter[k]) + ";")
	}
	return b.String()
}

func scopeHash(scope string) string {
	h := fnv.New64a()
	h.Write([]byte(scope))
	return strconv.FormatUint(h.Sum64(), 36)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Cursor checks the request and returns its page size and the pk below
// which its page starts (the newest session when PageToken is empty).
func (r ListSessionsRequest) Cursor() (size int, before int64, err error) {
	if size, err = PageSize(r.PageSize); err != nil {
		return 0, 0, err
	}
	if r.PageToken == "" {
		return size, 1<<63 - 1, nil
	}
	before, err = DecodePageToken(ListingSessions, r.scope(), r.PageToken)
	return size, before, err
}

// Cursor checks the request for the session's entries and returns its page
// size and the seq after which its page starts (0 when PageToken is
// empty).
func (r EntriesRequest) Cursor(sessionID string) (size int, after int64, err error) {
	if size, err = PageSize(r.PageSize); err != nil {
		return 0, 0, err
	}
	if r.PageToken == "" {
		return size, 0, nil
	}
	after, err = DecodePageToken(ListingEntries, sessionID, r.PageToken)
	return size, after, err
}

// NextPageToken is the token of the page after one that ended with the
// session whose pk is lastPK.
func (r ListSessionsRequest) NextPageToken(lastPK int64) string {
	return EncodePageToken(ListingSessions, r.scope(), lastPK)
}

// NextPageToken is the token of the page of the session's entries after
// one that ended with the entry whose seq is lastSeq.
func (r EntriesRequest) NextPageToken(sessionID string, lastSeq int64) string {
	return EncodePageToken(ListingEntries, sessionID, lastSeq)
}

package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/agentd/agentd/provider"
)

// ToolPrefix starts the name of every MCP tool the model sees; client
// tools may not use it.
const ToolPrefix = "mcp__"

// ModelName is the name the model calls a server's tool by:
// "mcp__<server>__<tool>", with characters of the tool's name outside
// a-z A-Z 0-9 _ - replaced by "_". A name longer than [provider.MaxToolNameLength] keeps
// its first part and ends in "_" and 8 hex digits of a hash of the server's
// and tool's names, so different tools keep different names.
func ModelName(server, tool string) string {
	clean := strings.Map(func(r rune) rune {
		if provider.IsToolNameChar(r) {
			return r
		}
		return '_'
	}, tool)
	name := ToolPrefix + server + "__" + clean
	if len(name) <= provider.MaxToolNameLength && clean == tool {
		return name
	}
	if len(name) <= provider.MaxToolNameLength {
		// Replaced characters may make two tools alike: the hash keeps
		// them apart only when needed, so plain names stay readable.
		name = name[:min(len(name), provider.MaxToolNameLength-9)]
	} else {
		name = name[:provider.MaxToolNameLength-9]
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return name + "_" + hex.EncodeToString(sum[:4])
}

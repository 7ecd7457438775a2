package provider

import "slices"

// BlockKind is the kind of a content block of an assistant message while
// it streams: the codes the adapters' Emitter and the agent loop's partial
// message share.
type BlockKind uint8

// The kinds of streamed content blocks.
const (
	// BlockText is a TextContent block.
	BlockText BlockKind = iota + 1
	// BlockThinking is a ThinkingContent block.
	BlockThinking
	// BlockToolCall is a ToolCall block.
	BlockToolCall
)

// ImageMIMETypes lists the image types every vision-capable provider
// accepts, in the order messages name them.
func ImageMIMETypes() []string {
	return []string{"image/png", "image/jpeg", "image/gif", "image/webp"}
}

// IsImageMIMEType reports whether t is one of ImageMIMETypes.
func IsImageMIMEType(t string) bool {
	return slices.Contains(ImageMIMETypes(), t)
}

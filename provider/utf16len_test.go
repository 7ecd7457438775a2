package provider_test

import (
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/agentd/agentd/provider"
)

// byteByByte is UTF16Len's definition, one byte at a time.
func byteByByte(s string) int64 {
	var n int64
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b < 0x80, b >= 0xC0 && b < 0xF0:
			n++
		case b >= 0xF0:
			n += 2
		}
	}
	return n
}

func TestUTF16Len(t *testing.T) {
	tests := []struct {
		name string
		s    string
	}{
		{"empty", ""},
		{"ascii shorter than a word", "port 30"},
		{"ascii of several words", strings.Repeat("port 3000, ", 9)},
		{"two-byte", strings.Repeat("été ", 7)},
		{"three-byte", strings.Repeat("記憶体と文脈", 5)},
		{"four-byte", strings.Repeat("😀a𝄞", 6)},
		{"mixed at every offset", "a😀bé記" + strings.Repeat("x", 13) + "𝄞ü"},
		{"a four-byte rune across a word boundary", "1234567😀89"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := provider.UTF16Len(tc.s), int64(len(utf16.Encode([]rune(tc.s)))); got != want {
				t.Fatalf("UTF16Len(%q) = %d, JavaScript's length is %d", tc.s, got, want)
			}
			// Every alignment of the text against the eight-byte words,
			// and so every length of the tail, cutting runes too.
			for cut := 1; cut < min(len(tc.s), 8); cut++ {
				if got, want := provider.UTF16Len(tc.s[cut:]), byteByByte(tc.s[cut:]); got != want {
					t.Fatalf("UTF16Len(%q) = %d, byte by byte %d", tc.s[cut:], got, want)
				}
			}
		})
	}
}

// FuzzUTF16Len holds the word-at-a-time count to the byte-by-byte one
// on any bytes, valid UTF-8 or not.
func FuzzUTF16Len(f *testing.F) {
	f.Add("port 3000, \xf0\x9f\x98\x80 été")
	f.Add("\x80\xbf\xc0\xef\xf0\xff\x00\x7f\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := provider.UTF16Len(s), byteByByte(s); got != want {
			t.Fatalf("UTF16Len(%q) = %d, byte by byte %d", s, got, want)
		}
	})
}

func BenchmarkUTF16Len(b *testing.B) {
	for _, tc := range []struct{ name, s string }{
		{"ascii", strings.Repeat("port 3000, ", 10_000)},
		{"cjk", strings.Repeat("記憶体と文脈", 2_000)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				provider.UTF16Len(tc.s)
			}
		})
	}
}

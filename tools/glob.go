package tools

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// maxGlobAlternatives bounds brace expansion, so `{a,b}{c,d}...` cannot
// explode.
const maxGlobAlternatives = 256

// glob matches slash-separated paths relative to a search directory, with
// the rules find and grep describe to the model (the behaviour of fd --glob
// as pi drives it): a pattern without '/' matches the base name at any
// depth; one with '/' matches the whole path at any depth unless it starts
// with '/', which anchors it at the search directory; '**' matches any
// number of directories; {a,b} gives alternatives; the rest is path.Match.
type glob struct {
	// alts holds, per alternative, either one base-name pattern (base true)
	// or the path segments to match.
	alts []globAlt
}

type globAlt struct {
	base bool
	segs []string
}

func compileGlob(pattern string) (*glob, error) {
	exp, err := expandBraces(pattern)
	if err != nil {
		return nil, fmt.Errorf("Invalid glob pattern %q: %w", pattern, err)
	}
	g := &glob{}
	for _, p := range exp {
		p = strings.TrimSuffix(p, "/")
		if p == "" {
			return nil, fmt.Errorf("Invalid glob pattern %q: empty alternative", pattern)
		}
		var alt globAlt
		switch {
		case !strings.Contains(p, "/"):
			alt = globAlt{base: true, segs: []string{p}}
		case strings.HasPrefix(p, "/"):
			alt = globAlt{segs: strings.Split(strings.TrimLeft(p, "/"), "/")}
		case strings.HasPrefix(p, "**/") || p == "**":
			alt = globAlt{segs: strings.Split(p, "/")}
		default:
			alt = globAlt{segs: append([]string{"**"}, strings.Split(p, "/")...)}
		}
		for _, s := range alt.segs {
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("Invalid glob pattern %q: %w", pattern, err)
			}
		}
		g.alts = append(g.alts, alt)
	}
	return g, nil
}

// match reports whether rel (slash-separated, relative to the search
// directory) matches.
func (g *glob) match(rel string) bool {
	segs := strings.Split(rel, "/")
	for _, a := range g.alts {
		if a.base {
			if ok, _ := path.Match(a.segs[0], segs[len(segs)-1]); ok {
				return true
			}
			continue
		}
		if matchSegs(a.segs, segs) {
			return true
		}
	}
	return false
}

func matchSegs(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchSegs(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], name[0])
	return ok && matchSegs(pat[1:], name[1:])
}

// expandBraces turns "a{b,c}d" into ["abd", "acd"], nesting allowed; a
// backslash escapes the next character.
func expandBraces(p string) ([]string, error) {
	open := -1
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				return nil, errors.New("unbalanced '}'")
			}
			depth--
			if depth == 0 {
				var parts []string
				start, d := open+1, 0
				for j := open + 1; j < i; j++ {
					switch p[j] {
					case '\\':
						j++
					case '{':
						d++
					case '}':
						d--
					case ',':
						if d == 0 {
							parts = append(parts, p[start:j])
							start = j + 1
						}
					}
				}
				parts = append(parts, p[start:i])
				rest, err := expandBraces(p[i+1:])
				if err != nil {
					return nil, err
				}
				var out []string
				for _, part := range parts {
					inner, err := expandBraces(part)
					if err != nil {
						return nil, err
					}
					for _, in := range inner {
						for _, r := range rest {
							out = append(out, p[:open]+in+r)
							if len(out) > maxGlobAlternatives {
								return nil, fmt.Errorf("more than %d alternatives", maxGlobAlternatives)
							}
						}
					}
				}
				return out, nil
			}
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced '{'")
	}
	return []string{p}, nil
}

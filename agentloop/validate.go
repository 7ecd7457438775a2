package agentloop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"google.golang.org/protobuf/types/known/structpb"
)

// argSchema is a tool's compiled JSON Schema plus compiled validators for the
// members of every anyOf/oneOf, which coercion needs to pick a member. It is
// built once per tool set and is read-only afterwards, so concurrent runs may
// share it.
type argSchema struct {
	raw    map[string]any
	schema *jsonschema.Schema
	// unions maps a JSON pointer of an anyOf/oneOf member to its validator.
	unions map[string]*jsonschema.Schema
}

func compileArgSchema(index int, params *structpb.Struct) (*argSchema, error) {
	var raw map[string]any
	if params == nil {
		raw = map[string]any{"type": "object"}
	} else {
		raw = params.AsMap()
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	url := fmt.Sprintf("urn:agentd:tool:%d", index)
	if err := c.AddResource(url, raw); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	as := &argSchema{raw: raw, schema: sch, unions: map[string]*jsonschema.Schema{}}
	collectUnions(raw, "", func(ptr string) {
		if s, err := c.Compile(url + "#" + ptr); err == nil {
			as.unions[ptr] = s
		}
	})
	return as, nil
}

// noLoader refuses every $ref beyond the schema itself: a caller's schema
// must not make agentd read its files (or block on a device) while
// compiling.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref %q is outside the schema; only references within it (\"#...\") are allowed", url)
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// collectUnions walks the same sub-schemas coercion walks and reports every
// anyOf/oneOf member.
func collectUnions(s any, ptr string, add func(string)) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[kw].([]any); ok {
			for i, sub := range list {
				p := ptr + "/" + kw + "/" + strconv.Itoa(i)
				if kw != "allOf" {
					add(p)
				}
				collectUnions(sub, p, add)
			}
		}
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for k, sub := range props {
			collectUnions(sub, ptr+"/properties/"+escapePointer(k), add)
		}
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		collectUnions(ap, ptr+"/additionalProperties", add)
	}
	switch items := m["items"].(type) {
	case map[string]any:
		collectUnions(items, ptr+"/items", add)
	case []any:
		for i, sub := range items {
			collectUnions(sub, ptr+"/items/"+strconv.Itoa(i), add)
		}
	}
	if list, ok := m["prefixItems"].([]any); ok {
		for i, sub := range list {
			collectUnions(sub, ptr+"/prefixItems/"+strconv.Itoa(i), add)
		}
	}
}

// validateArguments returns the coerced copy of args or the reference error
// text: `Validation failed for tool "<name>":` with one `  - <path>: <msg>`
// line per failing path, then the received arguments as indented JSON.
func (as *argSchema) validateArguments(toolName string, args *structpb.Struct) (*structpb.Struct, error) {
	var value any = map[string]any{}
	if args != nil {
		value = args.AsMap() // AsMap builds fresh maps: coercion works on a copy.
	}
	value = as.coerce(value, as.raw, "")
	verr := as.schema.Validate(value)
	if verr == nil {
		m, ok := value.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("Validation failed for tool %q:\n  - root: must be object", toolName)
		}
		out, err := structpb.NewStruct(m)
		if err != nil {
			return nil, fmt.Errorf("Validation failed for tool %q:\n  - root: %v", toolName, err)
		}
		return out, nil
	}
	var lines []string
	var ve *jsonschema.ValidationError
	if errors.As(verr, &ve) {
		collectErrorLines(ve, &lines)
	}
	if len(lines) == 0 {
		lines = append(lines, "Unknown validation error")
	}
	// The validator walks maps; sorting makes the text stable run to run.
	sort.Strings(lines)
	received := receivedJSON(args)
	return nil, &ArgumentsError{Tool: toolName, Problems: problemsOf(lines),
		text: "Validation failed for tool \"" + toolName + "\":\n" + strings.Join(lines, "\n") + "\n\nReceived arguments:\n" + received}
}

// receivedJSON renders arguments like JSON.stringify(args, null, 2). Keys
// come out sorted (a Struct keeps no order).
func receivedJSON(args *structpb.Struct) string {
	var v any = map[string]any{}
	if args != nil {
		v = args.AsMap()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "{}"
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

var englishPrinter = message.NewPrinter(language.English)

func instancePath(loc []string) string {
	return strings.Join(loc, ".")
}

func rootIfEmpty(p string) string {
	if p == "" {
		return "root"
	}
	return p
}

// collectErrorLines turns jsonschema's error tree into one line per failing
// leaf, worded like TypeBox's en_US messages that pi shows.
func collectErrorLines(ve *jsonschema.ValidationError, lines *[]string) {
	path := instancePath(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		for _, c := range ve.Causes {
			collectErrorLines(c, lines)
		}
		return
	case *kind.Required:
		p := k.Missing[0]
		if path != "" {
			p = path + "." + p
		}
		*lines = append(*lines, "  - "+p+": must have required properties "+strings.Join(k.Missing, ", "))
		return
	}
	*lines = append(*lines, "  - "+rootIfEmpty(path)+": "+kindMessage(ve.ErrorKind))
}

func ratString(r *big.Rat) string {
	if r == nil {
		return ""
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		if len(k.Want) == 1 {
			return "must be " + k.Want[0]
		}
		return "must be either " + strings.Join(k.Want, " or ")
	case *kind.AdditionalProperties:
		return "must not have additional properties"
	case *kind.AnyOf:
		return "must match a schema in anyOf"
	case *kind.OneOf:
		return "must match exactly one schema in oneOf"
	case *kind.Not:
		return "must not be valid"
	case *kind.FalseSchema:
		return "schema is false"
	case *kind.Const:
		return "must be equal to constant"
	case *kind.Enum:
		return "must be equal to one of the allowed values"
	case *kind.Format:
		return fmt.Sprintf("must match format %q", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("must match pattern %q", k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must not have fewer than %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must not have more than %d characters", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must not have fewer than %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must not have more than %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must not have fewer than %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must not have more than %d properties", k.Want)
	case *kind.Minimum:
		return "must be >= " + ratString(k.Want)
	case *kind.Maximum:
		return "must be <= " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + ratString(k.Want)
	case *kind.MultipleOf:
		return "must be multiple of " + ratString(k.Want)
	case *kind.UniqueItems:
		return "must not have duplicate items"
	case *kind.Contains:
		return "must contain at least 1 valid item"
	case *kind.DependentRequired:
		return fmt.Sprintf("must have properties %s when property %s is present", strings.Join(k.Missing, ", "), k.Prop)
	case *kind.Dependency:
		return fmt.Sprintf("must have properties %s when property %s is present", strings.Join(k.Missing, ", "), k.Prop)
	case *kind.PropertyNames:
		return fmt.Sprintf("property names %s are invalid", k.Property)
	}
	return k.LocalizedString(englishPrinter)
}

// ---- coercion (a port of pi's coerceWithJsonSchema, AJV coerceTypes-like) ----

func schemaTypes(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

func matchesType(v any, t string) bool {
	switch t {
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "null":
		return v == nil
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

// jsNumber parses a string like JavaScript's Number(): surrounding white
// space is ignored; the empty string is not a number here (pi checks that
// before calling Number).
func jsNumber(s string) (float64, bool) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, false
	}
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		n, err := strconv.ParseUint(t[2:], 16, 64)
		return float64(n), err == nil
	}
	lower := strings.ToLower(t)
	if strings.Contains(lower, "inf") || strings.Contains(lower, "nan") || strings.Contains(t, "_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// coercePrimitive returns the coerced value and whether it changed.
func coercePrimitive(v any, t string) (any, bool) {
	switch t {
	case "number", "integer":
		switch x := v.(type) {
		case nil:
			return 0.0, true
		case string:
			if strings.TrimSpace(x) == "" {
				return v, false
			}
			if f, ok := jsNumber(x); ok && (t == "number" || f == math.Trunc(f)) {
				return f, true
			}
		case bool:
			if x {
				return 1.0, true
			}
			return 0.0, true
		}
	case "boolean":
		switch x := v.(type) {
		case nil:
			return false, true
		case string:
			if x == "true" {
				return true, true
			}
			if x == "false" {
				return false, true
			}
		case float64:
			if x == 1 {
				return true, true
			}
			if x == 0 {
				return false, true
			}
		}
	case "string":
		switch x := v.(type) {
		case nil:
			return "", true
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), true
		case bool:
			return strconv.FormatBool(x), true
		}
	case "null":
		switch x := v.(type) {
		case string:
			if x == "" {
				return nil, true
			}
		case float64:
			if x == 0 {
				return nil, true
			}
		case bool:
			if !x {
				return nil, true
			}
		}
	}
	return v, false
}

func deepCopyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopyJSON(e)
		}
		return out
	}
	return v
}

func (as *argSchema) coerceUnion(v any, list []any, ptr, kw string) any {
	for i, sub := range list {
		p := ptr + "/" + kw + "/" + strconv.Itoa(i)
		candidate := as.coerce(deepCopyJSON(v), sub, p)
		if s := as.unions[p]; s != nil && s.Validate(candidate) == nil {
			return candidate
		}
	}
	return v
}

func (as *argSchema) coerce(v any, schema any, ptr string) any {
	s, ok := schema.(map[string]any)
	if !ok {
		return v
	}
	if list, ok := s["allOf"].([]any); ok {
		for i, sub := range list {
			v = as.coerce(v, sub, ptr+"/allOf/"+strconv.Itoa(i))
		}
	}
	if list, ok := s["anyOf"].([]any); ok {
		v = as.coerceUnion(v, list, ptr, "anyOf")
	}
	if list, ok := s["oneOf"].([]any); ok {
		v = as.coerceUnion(v, list, ptr, "oneOf")
	}
	types := schemaTypes(s)
	matchesMember := false
	if len(types) > 1 {
		for _, t := range types {
			if matchesType(v, t) {
				matchesMember = true
				break
			}
		}
	}
	if len(types) > 0 && !matchesMember {
		for _, t := range types {
			if c, changed := coercePrimitive(v, t); changed {
				v = c
				break
			}
		}
	}
	if obj, ok := v.(map[string]any); ok && contains(types, "object") {
		props, _ := s["properties"].(map[string]any)
		for k, ps := range props {
			if val, present := obj[k]; present {
				obj[k] = as.coerce(val, ps, ptr+"/properties/"+escapePointer(k))
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			for k, val := range obj {
				if _, defined := props[k]; defined {
					continue
				}
				obj[k] = as.coerce(val, ap, ptr+"/additionalProperties")
			}
		}
	}
	if arr, ok := v.([]any); ok && contains(types, "array") {
		switch items := s["items"].(type) {
		case []any:
			for i := range arr {
				if i < len(items) {
					arr[i] = as.coerce(arr[i], items[i], ptr+"/items/"+strconv.Itoa(i))
				}
			}
		case map[string]any:
			for i := range arr {
				arr[i] = as.coerce(arr[i], items, ptr+"/items")
			}
		}
	}
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

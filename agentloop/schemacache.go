package agentloop

import (
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// SchemaCache keeps compiled tool parameter schemas by their content, so
// that the tool set built for each run does not compile the same schemas
// again (compiling one, checked against the JSON Schema meta-schema, costs
// more than the rest of a run's start). A compiled schema is read-only and
// serves any number of runs at once. Safe for concurrent use.
type SchemaCache struct {
	max int

	mu      sync.Mutex
	schemas map[string]*argSchema
}

// NewSchemaCache returns a cache of at most size schemas (at least 1); once
// full, it starts again empty.
func NewSchemaCache(size int) *SchemaCache {
	return &SchemaCache{max: max(1, size), schemas: map[string]*argSchema{}}
}

// compile returns the compiled schema of the index-th tool's parameters,
// from the cache when it holds the same schema. A schema that does not
// compile is compiled again each time, so its error names the tool as it
// did the first time.
func (c *SchemaCache) compile(index int, params *structpb.Struct) (*argSchema, error) {
	if c == nil {
		return compileArgSchema(index, params)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(params)
	if err != nil {
		return compileArgSchema(index, params)
	}
	// No parameters compile as {"type":"object"}, an empty Struct as {}:
	// both marshal to nothing, so the key says which it is.
	key := "{" + string(raw)
	if params == nil {
		key = "nil"
	}
	c.mu.Lock()
	sch := c.schemas[key]
	c.mu.Unlock()
	if sch != nil {
		return sch, nil
	}
	if sch, err = compileArgSchema(index, params); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.schemas) >= c.max {
		clear(c.schemas)
	}
	c.schemas[key] = sch
	return sch, nil
}

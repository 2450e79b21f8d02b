package idemotel

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCachedSets bounds an attrCache: past it, sets are built for each
// measurement instead of kept (the attributes are bounded, so a cache this
// full means a route or host function that is not).
const maxCachedSets = 4096

// attrCache keeps the measurement options of each attribute combination, so
// that recording a measurement builds (sorts, allocates) no attribute set. The
// options are kept as the slice a Record or Add call takes (opts...), so that
// the call allocates no slice either.
type attrCache[K comparable] struct {
	m sync.Map // K -> *measureOpts
	n atomic.Int64
}

// measureOpts are one attribute set as the options of a counter's Add and of
// a histogram's Record.
type measureOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// get returns the options for k, building its attributes with build the
// first time.
func (c *attrCache[K]) get(k K, build func(K) []attribute.KeyValue) *measureOpts {
	if o, ok := c.m.Load(k); ok {
		return o.(*measureOpts)
	}
	set := metric.WithAttributeSet(attribute.NewSet(build(k)...))
	o := &measureOpts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	if c.n.Load() < maxCachedSets {
		if _, loaded := c.m.LoadOrStore(k, o); !loaded {
			c.n.Add(1)
		}
	}
	return o
}

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

// attrCache keeps the measurement option of each attribute combination, so
// that recording a measurement builds (sorts, allocates) no attribute set:
// with the no-op providers that is most of what instrumentation would cost.
type attrCache[K comparable] struct {
	m sync.Map // K -> metric.MeasurementOption
	n atomic.Int64
}

// get returns the option for k, building its attributes with build the first
// time.
func (c *attrCache[K]) get(k K, build func(K) []attribute.KeyValue) metric.MeasurementOption {
	if o, ok := c.m.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(build(k)...))
	if c.n.Load() < maxCachedSets {
		if _, loaded := c.m.LoadOrStore(k, o); !loaded {
			c.n.Add(1)
		}
	}
	return o
}

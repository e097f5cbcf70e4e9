// Package obs is what ginlimit's two metric exporters, package metrics
// (Prometheus) and package otelginlimit (OpenTelemetry), share, so that
// they keep the same series by the same rules: the defaults, the latency
// buckets, and the bounds on the (route, rule) label pairs. Route
// templates and rule names are finite in a sane application; a Cap is the
// backstop for one that is not, and "unmatched" stands for every request
// that matched no route, whose method the client chose freely.
package obs

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Defaults of both exporters.
const (
	// DefaultNearLimitFraction is the fraction of the limit under which an
	// allowed decision's remaining quota counts as near the limit.
	DefaultNearLimitFraction = 0.1
	// DefaultMaxSeries is how many distinct (route, rule) pairs an
	// exporter keeps.
	DefaultMaxSeries = 1000
)

// LatencyBuckets returns the upper bounds, in seconds, of the decision
// latency histogram, from a deny-cache answer to far beyond any sane
// decision timeout, in a new slice.
func LatencyBuckets() []float64 {
	return []float64{
		0.000_05, 0.000_1, 0.000_25, 0.000_5,
		0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
	}
}

// Label values the exporters themselves write.
const (
	// Other is the route and rule of every pair seen after the cap was
	// reached.
	Other = "other"
	// Unmatched is the route of the requests that matched no route.
	Unmatched = "unmatched"
)

// Cap holds, for each (route, rule) pair, a T made once by its make
// function, for at most max pairs; every later pair shares one T made for
// (Other, Other). It is safe for concurrent use, and Get takes no lock
// once a pair has been seen.
type Cap[T any] struct {
	max   int64
	make  func(route, rule string) T
	seen  sync.Map // key -> T, read without a lock
	mu    sync.Mutex
	n     atomic.Int64      // pairs with their own labels, at most max
	other atomic.Pointer[T] // the fold of the pairs past the cap; nil until needed
}

// key is a (route, rule) pair as an event gives it.
type key struct{ route, rule string }

// New returns a Cap of at most max pairs (max >= 1) whose values make
// makes from label values: route and rule valid UTF-8, route Unmatched
// for an unmatched request.
func New[T any](max int, make func(route, rule string) T) *Cap[T] {
	return &Cap[T]{max: int64(max), make: make}
}

// Get returns the value of the pair (route, rule): its own while the cap
// allows, the fold's after.
func (c *Cap[T]) Get(route, rule string) T {
	route = Route(route)
	k := key{route, rule}
	if v, ok := c.seen.Load(k); ok {
		return v.(T)
	}
	if c.n.Load() >= c.max {
		if v := c.other.Load(); v != nil {
			return *v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.seen.Load(k); ok {
		return v.(T)
	}
	if c.n.Load() >= c.max {
		v := c.other.Load()
		if v == nil {
			made := c.make(Other, Other)
			v = &made
			c.other.Store(v)
		}
		return *v
	}
	v := c.make(Value(route), Value(rule))
	c.seen.Store(k, v)
	c.n.Add(1)
	return v
}

// Labels returns the label values of the pair (route, rule) without
// making a value for it: its own when it has been seen or the cap allows
// more, (Other, Other) when the cap is full without it. For rare events,
// such as resets, that do not take a place under the cap.
func (c *Cap[T]) Labels(route, rule string) (string, string) {
	route = Route(route)
	if _, ok := c.seen.Load(key{route, rule}); !ok && c.n.Load() >= c.max {
		return Other, Other
	}
	return Value(route), Value(rule)
}

// Route returns Unmatched for the route of a request that matched no
// route (ginlimit labels it "unmatched"; an older one joined the method
// and an empty template with a space), route otherwise.
func Route(route string) string {
	if route != "" && route[len(route)-1] == ' ' {
		return Unmatched
	}
	return route
}

// Value returns s as a label value, which must be valid UTF-8. Route
// templates and rule names are in practice; this only keeps a malformed
// one from making an exporter panic on a request.
func Value(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

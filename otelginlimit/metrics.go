package otelginlimit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/obs"
)

// ScopeName is the instrumentation scope of the meter [NewMetrics] takes
// from its provider: the import path of this package.
const ScopeName = "github.com/ginlimit/ginlimit/otelginlimit"

// Defaults of [Metrics], the same as package metrics'.
const (
	// DefaultNearLimitFraction is the fraction of the limit under which an
	// allowed decision's remaining quota counts in ginlimit.near_limit
	// when no [NearLimitFraction] is given.
	DefaultNearLimitFraction = obs.DefaultNearLimitFraction
	// DefaultMaxSeries is how many distinct (route, rule) pairs a Metrics
	// keeps when no [MaxSeries] is given.
	DefaultMaxSeries = obs.DefaultMaxSeries
)

// outcomes are the values of the decision attribute, and otherOutcome the
// one of an outcome ginlimit does not make.
var outcomes = [...]ginlimit.Outcome{
	ginlimit.OutcomeAllowed,
	ginlimit.OutcomeLimited,
	ginlimit.OutcomeShadowLimited,
	ginlimit.OutcomeError,
	ginlimit.OutcomeSaturated,
	ginlimit.OutcomeFallback,
	ginlimit.OutcomeBanned,
	ginlimit.OutcomeClientGone,
	otherOutcome,
}

const otherOutcome = "other"

// Metrics records ginlimit's decisions with OpenTelemetry instruments that
// mirror the Prometheus collector of package metrics (see the package
// documentation, Metrics). Its Observe method is what ginlimit.Observe
// takes. Make one with [NewMetrics]; the zero value is not usable. A
// Metrics is safe for concurrent use, may observe any number of limiters
// and routes, and shares nothing with another.
type Metrics struct {
	nearLimit float64
	reasons   map[string]bool // identity.Reasons, the values of the reason attribute

	decisions  metric.Int64Counter
	latency    metric.Float64Histogram
	nearLimits metric.Int64Counter
	denyCache  metric.Int64Counter
	breaker    metric.Int64Gauge
	resets     metric.Int64Counter
	lastReset  metric.Float64Gauge
	failures   metric.Int64Counter

	pairs *obs.Cap[*series]
}

// series is the attribute sets of one (route, rule) pair, made once so
// that Observe builds none.
type series struct {
	decisions   [len(outcomes)]metric.MeasurementOption
	pair        metric.MeasurementOption
	route, rule string
}

// Compile-time check that Observe is an observer.
var _ func(context.Context, ginlimit.Event) = (*Metrics)(nil).Observe

// NewMetrics creates the instruments on a meter of mp named [ScopeName].
// It returns an error when an option is invalid or the provider refuses an
// instrument.
func NewMetrics(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("otelginlimit: NewMetrics: the MeterProvider is nil")
	}
	cfg := config{nearLimit: DefaultNearLimitFraction, maxSeries: DefaultMaxSeries}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("otelginlimit: NewMetrics: an option is nil")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, fmt.Errorf("otelginlimit: NewMetrics: %w", err)
		}
	}
	m := &Metrics{nearLimit: cfg.nearLimit, reasons: map[string]bool{}}
	for _, r := range identity.Reasons() {
		m.reasons[r] = true
	}
	if err := m.instruments(mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("otelginlimit: NewMetrics: %w", err)
	}
	m.pairs = obs.New(cfg.maxSeries, m.newSeries)
	return m, nil
}

// instruments creates m's instruments on meter.
func (m *Metrics) instruments(meter metric.Meter) error {
	var errs [8]error
	m.decisions, errs[0] = meter.Int64Counter("ginlimit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate limit decisions, by route template, rule and outcome."))
	m.latency, errs[1] = meter.Float64Histogram("ginlimit.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a rate limit decision took, Redis included."),
		metric.WithExplicitBucketBoundaries(obs.LatencyBuckets()...))
	m.nearLimits, errs[2] = meter.Int64Counter("ginlimit.near_limit", metric.WithUnit("{decision}"),
		metric.WithDescription("Allowed rate limit decisions that left less than the near-limit fraction of the limit."))
	m.denyCache, errs[3] = meter.Int64Counter("ginlimit.deny_cache.hits", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate limit rejections answered by the in-process deny cache, without a Redis call."))
	m.breaker, errs[4] = meter.Int64Gauge("ginlimit.breaker.open", metric.WithUnit("1"),
		metric.WithDescription("1 when the rule's Redis circuit breaker was open or half-open after the route's last decision, else 0."))
	m.resets, errs[5] = meter.Int64Counter("ginlimit.resets", metric.WithUnit("{reset}"),
		metric.WithDescription("Counts reset with Policy.Reset, by route template, rule and who asked (never the identity reset)."))
	m.lastReset, errs[6] = meter.Float64Gauge("ginlimit.reset.last", metric.WithUnit("s"),
		metric.WithDescription("When Policy.Reset last cleared a count of the route's rule, by who asked, in Unix seconds."))
	m.failures, errs[7] = meter.Int64Counter("ginlimit.identity.failures", metric.WithUnit("{request}"),
		metric.WithDescription("Requests answered 401 because a User rule found no valid identity, by route template, rule and reason."))
	return errors.Join(errs[:]...)
}

// newSeries makes the attribute sets of the label values route and rule.
func (m *Metrics) newSeries(route, rule string) *series {
	s := &series{
		pair:  metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route), attribute.String("rule", rule))),
		route: route,
		rule:  rule,
	}
	for i, o := range outcomes {
		s.decisions[i] = metric.WithAttributeSet(attribute.NewSet(
			attribute.String("route", route), attribute.String("rule", rule), attribute.String("decision", string(o))))
	}
	return s
}

// Observe records one decision. Give it to ginlimit.Observe, as the method
// value m.Observe; ginlimit calls it on the request's goroutine.
func (m *Metrics) Observe(ctx context.Context, e ginlimit.Event) {
	switch e.Outcome {
	case ginlimit.OutcomeReset:
		m.observeReset(ctx, &e)
		return
	case ginlimit.OutcomeUnauthorized:
		m.observeUnauthorized(ctx, &e)
		return
	}
	s := m.pairs.Get(e.Route, e.Rule)
	i := len(outcomes) - 1
	for j, o := range outcomes {
		if o == e.Outcome {
			i = j
			break
		}
	}
	m.decisions.Add(ctx, 1, s.decisions[i])
	m.latency.Record(ctx, max(e.Latency.Seconds(), 0), s.pair)
	d := &e.Decision
	if e.Outcome == ginlimit.OutcomeAllowed && d.Limit > 0 && float64(d.Remaining) < m.nearLimit*float64(d.Limit) {
		m.nearLimits.Add(ctx, 1, s.pair)
	}
	if d.Cached {
		m.denyCache.Add(ctx, 1, s.pair)
	}
	var open int64
	if e.Breaker == "open" || e.Breaker == "half-open" {
		open = 1
	}
	m.breaker.Record(ctx, open, s.pair)
}

// observeReset records a reset. Resets are rare, so their attributes are
// made on each one; past the MaxSeries cap, they are counted under
// "other" as decisions are.
func (m *Metrics) observeReset(ctx context.Context, e *ginlimit.Event) {
	route, rule := m.pairs.Labels(e.Route, e.Rule)
	set := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("route", route), attribute.String("rule", rule), attribute.String("by", obs.Value(e.By))))
	m.resets.Add(ctx, 1, set)
	m.lastReset.Record(ctx, float64(e.Decision.Time.UnixMilli())/1e3, set)
}

// observeUnauthorized records an identity failure by its reason, one of
// identity.Reasons (another is recorded as identity.ReasonOther).
func (m *Metrics) observeUnauthorized(ctx context.Context, e *ginlimit.Event) {
	s := m.pairs.Get(e.Route, e.Rule)
	reason := e.Reason
	if !m.reasons[reason] {
		reason = identity.ReasonOther
	}
	m.failures.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		attribute.String("route", s.route), attribute.String("rule", s.rule), attribute.String("reason", reason))))
}

// An Option configures [NewMetrics].
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	nearLimit float64
	maxSeries int
}

// NearLimitFraction sets when an allowed decision counts in
// ginlimit.near_limit: when its Remaining is less than f times its Limit.
// f must be from 0 (never count) to 1 (count every admission). The
// default is [DefaultNearLimitFraction].
func NearLimitFraction(f float64) Option {
	return optionFunc(func(c *config) error {
		if math.IsNaN(f) || f < 0 || f > 1 {
			return fmt.Errorf("NearLimitFraction(%v): the fraction must be from 0 to 1", f)
		}
		c.nearLimit = f
		return nil
	})
}

// MaxSeries caps how many distinct (route, rule) attribute pairs the
// Metrics keeps; the decisions of every pair seen after the first n are
// recorded under route="other", rule="other". n must be at least 1. The
// default is [DefaultMaxSeries].
func MaxSeries(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("MaxSeries(%d): the cap must be at least 1", n)
		}
		c.maxSeries = n
		return nil
	})
}

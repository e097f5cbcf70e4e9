package metrics

import (
	"context"
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/obs"
)

// Label values that the Collector itself writes.
const (
	// Other is the route and rule label value of the decisions of every
	// (route, rule) pair seen after the [MaxSeries] cap was reached.
	Other = obs.Other
	// Unmatched is the route label value of the decisions of requests that
	// matched no route, whose method the client chose freely.
	Unmatched = obs.Unmatched
)

// outcomes are the values of the decision label, in the order of
// [series.decisions]; the HELP text of ginlimit_decisions_total lists them.
var outcomes = [...]ginlimit.Outcome{
	ginlimit.OutcomeAllowed,
	ginlimit.OutcomeLimited,
	ginlimit.OutcomeShadowLimited,
	ginlimit.OutcomeError,
	ginlimit.OutcomeSaturated,
	ginlimit.OutcomeFallback,
	ginlimit.OutcomeBanned,
	ginlimit.OutcomeClientGone,
}

// outcomeIndex returns the index in outcomes of e's outcome. An outcome this
// package does not know (an Event made by hand, or a newer ginlimit) is
// classified again from the decision, so that the decision label keeps its
// eight values.
func outcomeIndex(e *ginlimit.Event) int {
	if i := indexOf(e.Outcome); i >= 0 {
		return i
	}
	return indexOf(classify(e.Decision))
}

// classify returns the outcome ginlimit gives d, for an Event that came
// without a known one. The order of the cases is ginlimit's: a decision
// can be both an error and a fallback, and the first case wins.
func classify(d ginlimit.Decision) ginlimit.Outcome {
	switch {
	case errors.Is(d.Err, ginlimit.ErrClientGone):
		return ginlimit.OutcomeClientGone
	case errors.Is(d.Err, ginlimit.ErrSaturated):
		return ginlimit.OutcomeSaturated
	case d.Local:
		return ginlimit.OutcomeFallback
	case d.Err != nil:
		return ginlimit.OutcomeError
	case d.Shadow:
		return ginlimit.OutcomeShadowLimited
	case d.Banned:
		return ginlimit.OutcomeBanned
	case !d.Allowed:
		return ginlimit.OutcomeLimited
	}
	return ginlimit.OutcomeAllowed
}

// indexOf returns the index of o in outcomes, or -1.
func indexOf(o ginlimit.Outcome) int {
	for i, known := range outcomes {
		if o == known {
			return i
		}
	}
	return -1
}

// Collector turns ginlimit decisions into Prometheus metrics (see the package
// documentation for the metrics and their labels). Its Observe method is
// what ginlimit.Observe takes: give it to a limiter or to routes with
// ginlimit.Observe(collector.Observe). It is a
// prometheus.Collector: register it with a prometheus.Registerer, once.
//
// A Collector is safe for concurrent use. Make one with [New]; the zero value
// is not usable. One Collector may observe any number of limiters and routes,
// and two Collectors share nothing.
type Collector struct {
	nearLimit float64

	decisions  *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	nearLimits *prometheus.CounterVec
	denyCache  *prometheus.CounterVec
	breaker    *prometheus.GaugeVec
	resets     *prometheus.CounterVec
	lastReset  *prometheus.GaugeVec
	failures   *prometheus.CounterVec
	reasons    map[string]bool // identity.Reasons, the values of failures' reason label

	pairs *obs.Cap[*series] // the series of each (route, rule) pair, folded past MaxSeries
}

// series is every metric of one (route, rule) pair, resolved once so that
// Observe does no label lookup.
type series struct {
	decisions [len(outcomes)]prometheus.Counter
	latency   prometheus.Observer
	nearLimit prometheus.Counter
	denyCache prometheus.Counter
	breaker   prometheus.Gauge

	route, rule string // the label values, for the series made on demand
}

// Compile-time checks that a Collector is what it says.
var (
	_ func(context.Context, ginlimit.Event) = (*Collector)(nil).Observe
	_ prometheus.Collector                  = (*Collector)(nil)
)

// New returns a Collector configured by opts. It panics if an option is
// invalid, naming it, the way gin panics on a bad route: a configuration
// error shows at start-up.
func New(opts ...Option) *Collector {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			cfg.invalid("New: an option is nil")
			continue
		}
		o.apply(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		panic(err)
	}
	pair := []string{"route", "rule"}
	c := &Collector{
		nearLimit: cfg.nearLimit,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ginlimit_decisions_total",
			Help: "Rate limit decisions, by route template, rule and outcome (" + outcomeList() + ").",
		}, []string{"route", "rule", "decision"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ginlimit_decision_seconds",
			Help:    "How long a rate limit decision took, Redis included, in seconds.",
			Buckets: obs.LatencyBuckets(),
		}, pair),
		nearLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ginlimit_near_limit_total",
			Help: "Allowed rate limit decisions that left less than the near-limit fraction of the limit.",
		}, pair),
		denyCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ginlimit_deny_cache_hits_total",
			Help: "Rate limit rejections answered by the in-process deny cache, without a Redis call.",
		}, pair),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ginlimit_breaker_open",
			Help: "1 when the rule's Redis circuit breaker was open or half-open after the route's last decision, else 0.",
		}, pair),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ginlimit_resets_total",
			Help: "Counts reset with Policy.Reset, by route template, rule and who asked (never the identity reset).",
		}, resetLabels),
		lastReset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ginlimit_last_reset_timestamp_seconds",
			Help: "When Policy.Reset last cleared a count of the route's rule, by who asked, in Unix seconds.",
		}, resetLabels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ginlimit_identity_failures_total",
			Help: "Requests answered 401 because a User rule found no valid identity, by route template, rule and reason (missing, malformed, bad_signature, expired, ...).",
		}, []string{"route", "rule", "reason"}),
		reasons: reasonSet(),
	}
	c.pairs = obs.New(cfg.maxSeries, c.newSeries)
	return c
}

// reasonSet returns the reasons of package identity, as a set.
func reasonSet() map[string]bool {
	set := map[string]bool{}
	for _, r := range identity.Reasons() {
		set[r] = true
	}
	return set
}

// resetLabels are the labels of the reset metrics.
var resetLabels = []string{"route", "rule", "by"}

// Observe counts one decision. Give it to ginlimit.Observe, as the method
// value collector.Observe; it is called by ginlimit on the request's goroutine; it takes no lock once e's (route,
// rule) pair has been seen.
func (c *Collector) Observe(_ context.Context, e ginlimit.Event) {
	switch e.Outcome {
	case ginlimit.OutcomeReset:
		c.observeReset(&e)
		return
	case ginlimit.OutcomeUnauthorized:
		c.observeUnauthorized(&e)
		return
	}
	s := c.pairs.Get(e.Route, e.Rule)
	i := outcomeIndex(&e)
	s.decisions[i].Inc()
	s.latency.Observe(max(e.Latency.Seconds(), 0))
	d := &e.Decision
	if outcomes[i] == ginlimit.OutcomeAllowed && d.Limit > 0 &&
		float64(d.Remaining) < c.nearLimit*float64(d.Limit) {
		s.nearLimit.Inc()
	}
	if d.Cached {
		s.denyCache.Inc()
	}
	if e.Breaker == "open" || e.Breaker == "half-open" {
		s.breaker.Set(1)
	} else {
		s.breaker.Set(0)
	}
}

// observeReset counts a reset. Resets are rare, so their series are looked
// up on each one; past the MaxSeries cap of (route, rule) pairs, they are
// counted under Other as decisions are.
func (c *Collector) observeReset(e *ginlimit.Event) {
	route, rule := c.pairs.Labels(e.Route, e.Rule)
	labels := []string{route, rule, obs.Value(e.By)}
	c.resets.WithLabelValues(labels...).Inc()
	c.lastReset.WithLabelValues(labels...).Set(float64(e.Decision.Time.UnixMilli()) / 1e3)
}

// observeUnauthorized counts an identity failure by its reason. The
// (route, rule) pair is that of the rule's decisions, folded under Other
// past the MaxSeries cap as they are; a reason this package does not know
// (an Event made by hand) is counted as identity.ReasonOther, so that the
// reason label keeps identity's few values.
func (c *Collector) observeUnauthorized(e *ginlimit.Event) {
	s := c.pairs.Get(e.Route, e.Rule)
	reason := e.Reason
	if !c.reasons[reason] {
		reason = identity.ReasonOther
	}
	c.failures.WithLabelValues(s.route, s.rule, reason).Inc()
}

// Describe sends the descriptors of every metric of the Collector. It
// implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.latency.Describe(ch)
	c.nearLimits.Describe(ch)
	c.denyCache.Describe(ch)
	c.breaker.Describe(ch)
	c.resets.Describe(ch)
	c.lastReset.Describe(ch)
	c.failures.Describe(ch)
}

// Collect sends the current value of every series. It implements
// prometheus.Collector and may run while decisions are observed.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.latency.Collect(ch)
	c.nearLimits.Collect(ch)
	c.denyCache.Collect(ch)
	c.breaker.Collect(ch)
	c.resets.Collect(ch)
	c.lastReset.Collect(ch)
	c.failures.Collect(ch)
}

// newSeries creates, at zero, every series of the label values route and
// rule.
func (c *Collector) newSeries(route, rule string) *series {
	s := &series{
		latency:   c.latency.WithLabelValues(route, rule),
		nearLimit: c.nearLimits.WithLabelValues(route, rule),
		denyCache: c.denyCache.WithLabelValues(route, rule),
		breaker:   c.breaker.WithLabelValues(route, rule),
		route:     route,
		rule:      rule,
	}
	for i, o := range outcomes {
		s.decisions[i] = c.decisions.WithLabelValues(route, rule, string(o))
	}
	return s
}

// outcomeList is outcomes, joined by commas, for the HELP text.
func outcomeList() string {
	names := make([]string, len(outcomes))
	for i, o := range outcomes {
		names[i] = string(o)
	}
	return strings.Join(names, ", ")
}

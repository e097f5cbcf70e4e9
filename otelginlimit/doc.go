// Package otelginlimit reports ginlimit's decisions to OpenTelemetry: on
// the request's trace, and as metrics beside (or instead of) the
// Prometheus ones of package metrics. Package ginlimit does not import
// OpenTelemetry; only this package does. Both parts are observers, given
// to a limiter or a route with ginlimit.Observe:
//
//	m, err := otelginlimit.NewMetrics(meterProvider)
//	...
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb),
//		ginlimit.Observe(otelginlimit.Trace), ginlimit.Observe(m.Observe))
//
// # Traces
//
// [Trace] adds a span event named "ginlimit.decision" to the span in the
// request's context, such as the one otelgin starts for the request, so a
// trace shows which rule decided, how, and how much quota was left. Its
// attributes:
//
//	ginlimit.rule         the rule that decided (Event.Rule)
//	ginlimit.outcome      allowed, limited, shadow_limited, error, saturated,
//	                      fallback, banned, client_gone, unauthorized or reset
//	ginlimit.limit        the rule's limit (decisions only)
//	ginlimit.remaining    the quota left after the request (decisions only)
//	ginlimit.retry_after  seconds a refused request should wait (when set)
//	ginlimit.reason       why the identity was refused (unauthorized only)
//
// An event, not span attributes, because a request can be decided by more
// than one limiter (a group's and a route's), and each decision is kept.
// No attribute carries the identity (IP, user id, token) or the Redis key,
// which holds it; the route is the span's own http.route.
//
// # Metrics
//
// [Metrics] records the instruments below, the same series with the same
// bounded attributes as the Prometheus collector of package metrics, under
// OpenTelemetry's names (an OpenTelemetry-to-Prometheus bridge adds the
// _total and unit suffixes back):
//
//	ginlimit.decisions{route,rule,decision}         counter        ginlimit_decisions_total
//	ginlimit.decision.duration{route,rule}          histogram (s)  ginlimit_decision_seconds
//	ginlimit.near_limit{route,rule}                 counter        ginlimit_near_limit_total
//	ginlimit.deny_cache.hits{route,rule}            counter        ginlimit_deny_cache_hits_total
//	ginlimit.breaker.open{route,rule}               gauge          ginlimit_breaker_open
//	ginlimit.resets{route,rule,by}                  counter        ginlimit_resets_total
//	ginlimit.reset.last{route,rule,by}              gauge (s)      ginlimit_last_reset_timestamp_seconds
//	ginlimit.identity.failures{route,rule,reason}   counter        ginlimit_identity_failures_total
//
// The attributes are bounded as package metrics bounds its labels (see its
// documentation, Cardinality): route templates and rule names only, at
// most [MaxSeries] (route, rule) pairs before the rest are counted under
// route="other", rule="other", route="unmatched" for requests that matched
// no route, reason one of identity.Reasons. decision is one of the eight
// decision outcomes; an Event made by hand with an outcome ginlimit does
// not make is counted as decision="other". The histogram has the
// Prometheus collector's explicit bucket boundaries, 50µs to 1s.
//
// # Concurrency
//
// Trace and Metrics.Observe are safe for concurrent use and run on the
// request's goroutine: Trace does nothing when the span is not recording,
// and Observe takes no lock once a (route, rule) pair has been seen.
package otelginlimit

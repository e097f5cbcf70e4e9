// Package metrics exports the rate limit decisions of ginlimit as Prometheus
// metrics. A [Collector] is both an observer, its Observe method given to a
// limiter or a route with ginlimit.Observe(collector.Observe), and a
// prometheus.Collector, registered with a prometheus.Registry:
//
//	collector := metrics.New()
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(collector)
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Observe(collector.Observe))
//	...
//	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
//
// Only this package imports client_golang; package ginlimit does not.
//
// # Metrics
//
// Every metric is labelled by route and rule. route is the method and route
// template of the request (ginlimit.Event.Route, e.g. "GET /api/coupon/claim")
// and rule is the name of the rule that decided (ginlimit.Event.Rule); on a
// route with several rules that is the rule that refused or, when the request
// was admitted, the one with the least quota left.
//
//	ginlimit_decisions_total{route,rule,decision}  counter: decisions, by outcome
//	ginlimit_decision_seconds{route,rule}          histogram: how long a decision took, Redis included
//	ginlimit_near_limit_total{route,rule}          counter: allowed decisions that left less than
//	                                               NearLimitFraction of the limit (default 0.1)
//	ginlimit_deny_cache_hits_total{route,rule}     counter: rejections answered by the in-process
//	                                               deny cache, without Redis
//	ginlimit_breaker_open{route,rule}              gauge: 1 when the rule's circuit breaker was open
//	                                               or half-open after the route's last decision, else 0
//	ginlimit_resets_total{route,rule,by}           counter: counts cleared with Policy.Reset
//	ginlimit_last_reset_timestamp_seconds{route,rule,by}
//	                                               gauge: when the last of them was, in Unix seconds
//	ginlimit_identity_failures_total{route,rule,reason}
//	                                               counter: requests answered 401 because a User rule
//	                                               found no valid identity, by reason
//
// by is who asked for a reset, as the application gave it to Policy.Reset
// (an admin tool's name, say); the identity whose count was cleared is never
// a label. route is "" for a policy used through Policy.Allow.
//
// reason is one of the few identity.Reason values (missing, malformed,
// bad_signature, expired, not_yet_valid, unknown_kid, algorithm, claims,
// other): a wrong JWT secret shows as bad_signature on every request,
// skewed clocks as expired or not_yet_valid. Its series are made on the
// first failure of each reason; these requests are not decisions, and
// ginlimit_decisions_total does not count them.
//
// decision is one of the eight ginlimit outcomes: allowed, limited,
// shadow_limited, error, saturated, fallback, banned and client_gone
// (Event.Outcome, the ginlimit.Outcome constants). The
// histogram's buckets run from 50µs (a deny-cache answer) to 1s (far beyond
// any sane decision timeout): 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms,
// 10ms, 25ms, 50ms, 100ms, 250ms, 500ms, 1s.
//
// Every series of a (route, rule) pair is created, at zero, when the pair is
// first seen, so that rate() and increase() have a starting point and a
// missing series means a missing route, not a quiet one.
//
// The breaker gauge is only as fresh as the route's last decision: it changes
// when a request is decided, not when the breaker's open period runs out.
//
// # Cardinality
//
// Every series costs memory in the process and, far more, in Prometheus,
// which keeps an index entry per series for as long as it retains data; one
// runaway label can slow every query or take the server down. The labels are
// therefore the application's route templates and rule names only: a
// ginlimit.Event never carries the client IP or the user id, and the raw
// URL never appears (/voucher-order/seckill/1 and /2 share the template
// /voucher-order/seckill/:id).
//
// That bounds the labels only as far as the application keeps its templates
// and rule names finite, which a bug, dynamically registered routes or rule
// names built at run time can break. So, as a backstop, a Collector keeps at
// most [MaxSeries] distinct (route, rule) pairs (default
// [DefaultMaxSeries]); the decisions of every later pair are counted under
// route="other", rule="other". Totals stay exact (a sum over all labels is
// right) and only the breakdown of the late pairs is lost (the "other"
// breaker gauge is that of whichever folded pair decided last). The first
// pairs seen keep their own labels for the life of the Collector, which is
// why a route="other" series is worth an alert: it means the cap was reached.
// A pair has 28 series (8 decisions, 17 for the histogram, 3 more), so the
// default cap bounds a Collector at about 28,000 series.
//
// One part of a route label comes from the client: on a request that matched
// no route (a 404 or 405 that runs a rate limit, given to engine.Use or
// engine.NoRoute), the route template is empty and the method is whatever the
// client sent. Such routes are all labelled route="unmatched", so that a
// client cannot fill the cap with made-up methods.
//
// # Concurrency
//
// A Collector is safe for concurrent use: Observe runs on the request's
// goroutine and takes no lock once a pair has been seen, and Collect may run
// at the same time.
package metrics

// Package ginlimit rate-limits Gin routes with Redis: an exact sliding window
// shared by every instance of an application, declared per route the way
// Java teams declare @RateLimiter(key, window, limit, message, type).
//
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.UserIdentity(jwt))
//	r.GET("/api/coupon/claim", limiter.RateLimit(
//		ginlimit.Key("coupon:claim:"), ginlimit.Window(60*time.Second), ginlimit.Limit(3),
//		ginlimit.Message("You are claiming coupons too often, please try again later"),
//		ginlimit.Per(ginlimit.User)), claim)
//
// A [Limiter] carries what routes share (the Redis client, identity settings,
// failure policy); each route states its own rule. [Limiter.RateLimit] is the
// way to attach one: every configuration error panics at start-up, naming
// the option. The package-level [RateLimit] is the same annotation with the
// limiter among its options, ginlimit.RateLimit(limiter, ...).
// [Limiter.Policy] compiles the same options into a [Policy], to look at
// or reset the route's counts ([Policy.Peek], [Policy.Reset]) or to decide
// without gin ([Policy.Allow]).
//
// # Routes and rules
//
// A route has one rule, or several declared with [Rule], decided in one
// script call, atomically and all or nothing. Route options concern the
// whole request (backend, timeout, failure policy, deny cache, headers,
// response, observers, shadow); [RuleOption]s concern one count (name, key
// prefix, algorithm, window, limit, dimension, cost, message). A Rule
// accepts only RuleOptions, so a route option inside one does not compile.
// A rule counts per what [Per] names: [Method] (the whole route), [IP],
// [User], [UserOrIP], or any combination of request values. It can choose
// its limit per request ([LimitBy]), ban abusers ([Ban]) or cap requests
// in flight ([InFlight]); [Policy.Peek] and [Policy.Reset] inspect and
// clear a count named by a [Target].
//
// # Algorithms
//
// [Algorithm] picks one per rule; each runs as one atomic Lua script on the
// Redis clock, in one round trip, with a TTL on every key, and supports
// [Cost]. [SlidingLog] (default) is exact; [SlidingCounter] sums
// [DefaultSubWindows] sub-windows and can admit up to 2·limit over a
// window at worst; [FixedWindow] up to 2·limit across a boundary;
// [TokenBucket] (GCRA) allows bursts of up to [Burst].
//
// # Keys
//
// A decision's Redis key is
//
//	<prefix>[<tag>]{<METHOD> <route template>[ <dimension>]}              one rule
//	<prefix>[<tag>]{<METHOD> <route template>} rule:<name>[ <dimension>]  Rules
//	<prefix>[<tag>]{* shared} rule:<name>[ <dimension>]                   Per(Shared)
//
// The prefix is [Key] (default "rate_limit:"); the tag names the algorithm.
// The route template is c.FullPath(), so /voucher-order/seckill/1 and
// /voucher-order/seckill/2 share one bucket; a request that matched no
// route has the fixed scope "* unmatched", so the client never chooses key
// text. Values taken from the request are escaped and bounded in length, so
// no identity can forge another's key. The braces are a Redis Cluster hash
// tag. A [ByParam] or [ByHeader] dimension gets a key per value the client
// sends: check such values before the limit runs.
//
// # Identity
//
// [IP] routes count per client address as resolved by identity.IP: the TCP
// peer, unless it is a trusted proxy ([IPIdentity]); gin's ClientIP, which
// trusts X-Forwarded-For from anyone, is not used. [User] routes count per
// user id from [UserIdentity], typically identity.JWT. A request with no
// valid identity on a User route is answered 401, with WWW-Authenticate
// for JWT, and counted nowhere; observers see [OutcomeUnauthorized] with
// its reason, never the token.
//
// # Responses and headers
//
// A limited request is answered 429 {"code":429,"message":"<Message>"} and
// the chain is aborted. Every response of a limited route that Redis decided
// carries
//
//	RateLimit-Policy: "<name>";q=<limit>;w=<window in seconds, rounded up>
//	RateLimit: "<name>";r=<remaining>;t=<seconds until more quota, rounded up>
//	X-RateLimit-Limit, X-RateLimit-Remaining
//	X-RateLimit-Reset: <Unix time in seconds, rounded up, when more quota comes>
//
// in the syntax of draft-ietf-httpapi-ratelimit-headers, and a 429 also
// carries Retry-After in seconds, at least 1. A rule with
// [HashIdentities] that counts per someone adds the draft's partition key,
// pk, the identity's keyed hash; an in-flight rule's policy says
// qu="concurrent-requests". Package ginlimit/problem answers a 429 in RFC
// 9457 problem+json instead. The handler reads the decision with
// [DecisionFrom]; [Respond] writes a 429 of your own, and [Observe] sees
// every decision, refusal and Redis error. A deny cache
// ([DenyCache]) answers refusals that are certain in process, so a flood on
// an over-limit key costs Redis about one call per key per
// [DefaultMaxStaleness].
//
// # Failures
//
// A decision waits at most [DefaultQueueTimeout] in this process, then
// gives Redis [Timeout] ([DefaultTimeout]). When Redis fails, the failure
// policy decides: [FailLocal], the default, answers with an in-process
// token bucket per key, each instance enforcing its share of the limit
// (see [InstancesKey], [LocalInstances]), continuing from what Redis last
// said; [FailClosed] answers 503; [FailOpen] lets the request through. A
// circuit breaker per Redis node ([DefaultBreakerFailures]) answers at once
// while Redis is down, and an outage is logged when it starts and ends. A
// process that cannot get a decision to a healthy Redis in time
// ([ErrSaturated]) answers 503 under every policy, with a Retry-After of
// [DefaultBreakerOpen]; a request whose own context ends first
// ([ErrClientGone]) is aborted with 499. Errors and log lines name the
// route template and the rule, never the key or the identity, and no
// internal error text reaches a response body.
//
// Misconfiguration never passes silently: [New] returns an error and
// [Limiter.RateLimit] and [RateLimit] panic at start-up, naming the option.
// What can only be checked on a request (a [ByParam] the route lacks)
// answers 500 and logs the cause. ginlimit logs to slog.Default().
//
// # More
//
// In the repository: README.md for usage; docs/features.md, algorithms.md,
// operations.md ([Policy.SetLimit], Redis Cluster, sizing) and
// performance.md for depth; docs/design.md for contributors.
package ginlimit

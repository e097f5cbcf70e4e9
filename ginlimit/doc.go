// Package ginlimit rate-limits Gin routes with Redis: an exact sliding window
// shared by every instance of an application, declared per route the way
// Java teams declare @RateLimiter(key, window, limit, message, type).
//
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.UserIdentity(jwt))
//	r.GET("/api/coupon/claim", limiter.RateLimit(
//		ginlimit.Key("coupon:claim:"), ginlimit.Window(60*time.Second), ginlimit.Limit(3),
//		ginlimit.Message("You are claiming coupons too often, please try again later"),
//		ginlimit.Type(ginlimit.User)), claim)
//
// A [Limiter] carries what routes share (the Redis client, identity settings,
// failure policy); each route states its own rule. [Limiter.RateLimit] is the
// recommended way to attach one: every configuration error panics at
// start-up, and nothing can be wired in the wrong order. The package-level
// [RateLimit] is the same annotation for a limiter installed earlier in the
// chain with [Limiter.Middleware]. [Limiter.Policy] gives the same decisions
// without gin.
//
// # Routes and rules
//
// A route has one rule, or several declared with [Rule]; a route with one
// rule is a route with a list of one, and both take the same path. The
// options come in two kinds, which the compiler tells apart (see [Option]):
// route options concern the whole request (backend, timeout, failure
// policy, deny cache, headers, response, hooks, observers, skip, shadow);
// [RuleOption]s concern one count (name, key prefix, algorithm, window,
// limit and their parameters, dimension, cost, message). A Rule accepts
// only RuleOptions, so a route option inside one does not compile.
//
// # The decision pipeline
//
// Every decision, for one rule or several, from gin or from [Policy.Allow],
// takes one path:
//
//	identity → key → cost → deny cache → backend call → parse → fallback → answer
//
// The backend is the Redis call path of one client: a [Limiter] keeps one
// per client, which loads every script once at start-up and holds the
// circuit breakers (one per Redis: per master on a cluster, per shard on a
// Ring), the auto-pipeliner and the bound on each call's time. It knows
// nothing about HTTP or policy; the pipeline knows nothing about
// connections. One rule is
// decided by its algorithm's own script, several by the several-rule
// script; both take the same arguments and give the same reply, so the Go
// side has one parse path.
//
// # Where things live
//
// Each idea has one file:
//
//   - options.go: the two kinds of options, the configuration they fill,
//     and [Rule]; rule_options.go and route_options.go: the core options of
//     each kind (a feature's own options are in its file);
//   - policy.go: compiling the options into a [Policy] and its rules;
//   - pipeline.go: the decision pipeline;
//   - key.go: every Redis key, built by one function;
//   - dimension.go: what a rule counts per ([LimitType], [Per] and its
//     [Dimension]s) and how the identity is found;
//   - algorithm.go: the algorithms and their scripts (the Lua is in package
//     lua, one file per algorithm);
//   - backend.go, nodes.go, breaker.go: the Redis call path; each node's
//     slots (calls on the wire) and circuit breaker;
//   - denycache.go, failure.go, plans.go: the deny cache, the failure
//     policies with the FailLocal fallback, and limits chosen per request
//     ([LimitBy], [Tiers]);
//   - ban.go: bans ([Ban]): a rule's penalty, decided with it in one call
//     (the Lua is lua/penalty.lua), and folded into its decision by
//     pipeline.go;
//   - inflight.go: in-flight limits ([InFlight]): the option, taking,
//     renewing and giving back slots, and their FailLocal fallback (the
//     Lua is lua/inflight.lua);
//   - inspect.go, coherence.go: [Target], [Policy.Peek] and [Policy.Reset];
//     how every instance's in-process state follows Redis (the staleness
//     bound, and the reset announcements on [ResetChannel]);
//   - response.go: every answer (401, 429, 500, 503), the headers, shadow
//     mode and the Respond and OnLimited hooks;
//   - observe.go, logging.go, decision.go: observers, log lines, and the
//     Decision handlers read.
//
// To add an algorithm: a constant in algorithm.go (its number is the
// constant's value) with its param and maxCost, a lua/<name>.lua file with
// its validate, check, commit and report sections (see package lua), and its entry in the
// package doc and the README. To add an identity dimension: a [Dimension]
// constructor and its case in identify (and targetWho in inspect.go for
// Peek and Reset), all in dimension.go but the last. To change the 429 body:
// the rule's precomputed body in compileRule (policy.go); response.go
// writes it.
//
// # Algorithms
//
// [Algorithm] picks one per rule. Every algorithm runs as one atomic Lua
// script on the Redis clock (TIME), in one round trip, with a TTL on every
// key, on keys that are Redis Cluster safe; every one returns the same
// [Decision] and the same headers, and supports [Cost].
//
//   - [SlidingLog] (default): exact. Over any window-long span (now-w, now]
//     at most limit units are admitted. Memory: one sorted-set entry per
//     admitted request in the window, whatever its cost (so a weighted
//     request costs Redis O(log n) work, like any other), about 37 bytes
//     each while the set is a listpack (up to 128 entries) and about 129
//     bytes each beyond: roughly 3.7 KB at limit 100 and 1.3 MB at limit
//     10,000.
//   - [SlidingCounter]: the window is split into [SubWindows] (default 10)
//     aligned parts, and the count is the sum of the parts that overlap the
//     window. The counted span is between (N-1)/N of the window and all of
//     it: any span of (N-1)/N of the window admits at most limit units, but
//     a full window-long span can, in the worst case (two bursts a little
//     more than (N-1)/N of the window apart), admit up to 2·limit. In
//     practice it errs on a small share of requests, which the tests measure
//     against the exact log. Memory: one string of 13 + 4·N bytes (the
//     counts of the sub-windows and their total), about 150 bytes at N = 10,
//     whatever the limit.
//   - [FixedWindow]: one count per window aligned on the Redis clock. Exact
//     within each window, but up to 2·limit units can pass across a boundary
//     within one window's length. Memory: one 11-byte string (the window's
//     start and its count), under 100 bytes.
//   - [TokenBucket] (GCRA): limit tokens refill per window into a bucket of
//     [Burst] tokens (default limit). After a quiet spell a burst of up to
//     Burst passes at once; sustained, the rate is limit per window. Exact
//     with respect to its definition (exact integer arithmetic, in 1/limit
//     µs). Memory: one 21-byte string, under 100 bytes.
//
// A request that costs more than a rule can ever admit (its limit, or a
// bucket's burst) is rejected at once with [Decision.Reason] set and a 429
// that says so; it is never queued or retried.
//
// [Rule] puts several rules on one route; one script call decides all of
// them, atomically and all or nothing, and a request rejected by one rule
// consumes nothing from the others.
//
// # In-flight limits
//
// A rule made with [InFlight](n, lease) caps how many requests are being
// served at once instead of how many arrive per window: at most n requests
// of the rule, per combination of its dimensions, over every instance.
//
//	r.GET("/api/coupon/seckill/order", limiter.RateLimit(ginlimit.Key("coupon:order:"),
//		ginlimit.Rule(ginlimit.Name("rate"), ginlimit.Window(time.Second), ginlimit.Limit(100)),
//		ginlimit.Rule(ginlimit.Name("orders"), ginlimit.InFlight(10, 30*time.Second))), order)
//
// A request takes a slot before the rest of the chain runs and gives it
// back when the chain returns, a panic included (the panic goes on to
// gin's recovery). A slot is a lease in a sorted set on the Redis clock:
// the slots of an instance that died free themselves when their leases
// end, and a request still running renews its lease every lease/3, so a
// handler longer than the lease keeps its slot (a lease that lapses all
// the same is logged). The rate rules are decided first; only a request
// they admit asks for slots, in one more script call for all the route's
// in-flight rules, all or nothing. A request refused for want of a slot
// has been counted by the rate rules. It is answered 429 with Retry-After:
// 1 through the same path as a rate refusal (503 stays the answer of a
// limiter that cannot decide). An in-flight rule costs two Redis calls per
// request (acquire and release) and one per lease/3 of handler time; it
// has no deny cache, since its slots free on release, not with time. The
// keys are the rule's as for any rule, with "if:" after the prefix; its
// RateLimit-Policy item has no w (a count in flight has no window). When
// Redis fails, [FailLocal] counts n/[LocalInstances] slots per key in
// process, the slots the instance holds in Redis included, [FailOpen] lets
// the request through without a slot, and
// [FailClosed] answers 503. Renewals and releases have capacity of their
// own, so a flood of decisions never makes a held lease lapse while Redis
// answers.
//
// # The deny cache
//
// A rejection is certain until the first moment the key's remaining quota
// can grow: for the sliding log, when the oldest request leaves the window
// (entries leave only by time, and other instances can only add); for the
// fixed window, when the window ends; for the token bucket, when the next
// whole token accrues; for the counter, when the oldest counted sub-window
// leaves. Each script reports exactly that moment. So each rule remembers,
// in process and per key, the bound the last decisions proved, until that
// moment (measured from when the call was sent, so it never outlasts the
// truth), or for [MaxStaleness] (1 s by default), whichever comes first:
//
//   - remaining below the request's cost: requests are rejected in
//     process, as Redis would reject them ([Decision.Cached] is true). A
//     flood on an over-limit key costs Redis one call per MaxStaleness.
//   - a small remaining r: at most r calls on the key are in flight at once;
//     further requests wait for one to finish and look again, so requests
//     that would be rejected do not reach Redis either. In a flood of 9,600
//     requests from 32 goroutines at limit 100, Redis sees exactly 100 calls.
//
// The cache is bounded ([DenyCache] keys per rule, default 10,000) and can be
// turned off with DenyCache(0). On a route with Rules, a request that one
// rule certainly rejects is rejected in process (the rules are all or
// nothing); such a decision has no Rules, and its RateLimit field lists
// only that rule. A cached rejection's Retry-After is the moment that
// rule's quota first grows: for a request that costs more than one unit,
// or on a route with Rules, Redis may then still refuse it, so there it is
// a lower bound. A reset made with [Policy.Reset] is seen by every
// instance's cache at once; a change to a key behind ginlimit's back (a
// DEL, FLUSHALL, an eviction) within MaxStaleness.
//
// # Inspect and reset
//
// [Policy.Peek] reads a count without counting, and [Policy.Reset] clears
// it; both take a [Target] (route or Allow key, rule, user or IP), from
// which the key is built as a request's would be. Reset announces the keys
// on [ResetChannel]; every limiter subscribed there (one subscription per
// Redis client, ended by [Limiter.Close]) drops them from its deny caches
// and FailLocal buckets and acknowledges, and Reset returns once all have,
// or after MaxStaleness. See coherence.go for why pub/sub and how a lost
// subscription is handled.
//
// # Auto-pipelining
//
// [AutoPipeline] sends decisions through go-redis's AutoPipeliner, which
// batches the calls of concurrent requests into pipelines. Each decision is
// still its own atomic script call with its own timeout.
//
// # Keys
//
// A decision's Redis key is
//
//	<prefix>[<tag>]{<METHOD> <route template>[ <dimension>]}              one rule
//	<prefix>[<tag>]{<METHOD> <route template>} rule:<name>[ <dimension>]  Rules
//
// The prefix is [Key] (default "rate_limit:"). The tag names the algorithm
// and what shapes its data (nothing for the sliding log, "sc-<sub-window
// µs>:", "fw2:", "tb-<limit>:"), so a route switched to another algorithm
// starts on fresh keys and no script meets another's data. The route
// template is c.FullPath(), so /voucher-order/seckill/1 and
// /voucher-order/seckill/2 share one bucket; a request that matched no
// route has the fixed scope "* unmatched" instead, so the client never
// chooses key text. The dimension is empty for [Method], "ip:<addr>" for
// [IP] and "user:<id>" for [User], and one " <label>:<value>" per
// dimension of a [Per] rule ("p.id:7", "h.x-api-key:...", "f.<name>:...").
// Route templates and values are percent-escaped ('%', '{', '}', spaces and
// non-printable bytes; user ids and the other values taken from the request
// keep only letters, digits and -._~@:+=), so no identity can forge another
// identity's key, add a dimension or close the hash tag; a value longer
// than 256 bytes goes in as "%~" and a hash (a form escaping never writes),
// so no key is longer than its configuration allows. A [Ban]'s key is the
// rule's with "ban:" after the prefix, an [InFlight] rule's with "if:". The
// braces are a Redis Cluster hash tag: the key of one route and identity
// always maps to one slot, and different routes and identities spread over
// the cluster; the keys of a route's Rules share the route's slot, as one
// script call needs. A route group's annotation counts each route of the
// group separately. For example:
//
//	coupon:claim:{GET /api/coupon/claim user:alice}
//	coupon:merchant:{GET /api/coupon/merchant ip:192.0.2.1}
//	voucher:seckill:{GET /voucher-order/seckill/:id}
//
// # Values the client chooses
//
// A [ByParam] or [ByHeader] dimension counts per a value the client
// writes into its request, and escaping bounds each key's length, not how
// many keys there are: every distinct value gets a key of its own, kept
// for the rule's window. A client that sends a million made-up voucher ids
// or API keys leaves a million keys in Redis. Another limit on the
// route, per user or per IP, slows this down but does not bound it. The
// package cannot tell a real value from a made-up one; the application
// can, so bound the values before the limit runs: a handler ahead of the
// rule aborts the request when its value names nothing the application
// has, and the limit never counts it.
//
//	requireVoucher := func(c *gin.Context) {
//		if !vouchers.Exists(c.Param("id")) {
//			c.AbortWithStatusJSON(http.StatusNotFound, gin.H{"code": 404, "message": "Voucher not found"})
//		}
//	}
//	r.GET("/api/vouchers/:id/claim", requireVoucher, limiter.RateLimit(
//		ginlimit.Key("voucher:claim:"), ginlimit.Window(24*time.Hour), ginlimit.Limit(1),
//		ginlimit.Per(ginlimit.ByUser(), ginlimit.ByParam("id"))), claim)
//
// The route's keys are then bounded by the values the application knows,
// times the other dimensions. Check the text as it will be counted: a
// check that parses "07" as the number 7 lets it through, and the limit
// counts it apart from "7". For a header such as an API key, check it
// against the keys issued (401 otherwise), or resolve the account in your
// own middleware and count that with identity.FromContext. A [ByFunc]
// function can do the check itself, returning false for an unknown value.
// The coupon demo (example/coupon) does this for its voucher claims.
//
// # Identity
//
// [IP] routes count per client address as resolved by identity.IP: the TCP
// peer, unless the peer is a configured trusted proxy (see [IPIdentity]);
// gin's own ClientIP, which trusts X-Forwarded-For from anyone by default, is
// not used. [User] routes count per user id from [UserIdentity], typically
// identity.JWT. A request with no valid identity on a User route is answered
// 401 {"code":401,"message":"Authentication required"}, with
// WWW-Authenticate: Bearer for JWT, and is counted in no bucket.
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
// carries Retry-After in seconds, at least 1. "More quota" comes at the
// first moment the algorithm's remaining quota can grow (see
// [Decision.Reset]). For the sliding log, remaining and reset are exact on a
// rejection and when fewer than 64 requests remain; with more left,
// remaining is a lower bound and reset is the window (an upper bound), which
// saves the script two Redis commands. On a route with Rules,
// RateLimit-Policy and RateLimit list every rule, and the X-RateLimit-*
// fields are the deciding rule's. The handler can read the decision with
// [DecisionFrom].
//
// # Failures
//
// A decision has two bounds, kept apart. Waiting in this process is not
// Redis failing: a backend never has more calls on the wire than the
// client's pool has connections (64 times that when they are
// auto-pipelined), and a decision waits its turn for one, and for calls in
// flight on its key, for at most [QueueTimeout] (default 1 s) and its
// request's context. Once the call has its connection, Redis has [Timeout]
// (default 100 ms) to answer, on every kind of client, even without
// ContextTimeoutEnabled and before a cluster's slots are loaded. A call
// that misses the Timeout while Redis answers the backend's other calls to
// that node in time waited behind this process's own calls, and is not a
// Redis failure either; nor is one after which Redis answers a PING within
// the Timeout (this process read the reply late). A Redis that refuses or resets
// connections is a failure at once, not after the Timeout: once a call to
// a node failed, the next one first dials the node.
//
// Every reply error has a class and an answer:
//
//   - a configuration the scripts would refuse is refused at start-up;
//   - a type clash cannot happen: the algorithm and the shape of its data
//     are part of the key's namespace;
//   - NOSCRIPT (after SCRIPT FLUSH or a restart) is retried once with EVAL;
//   - Redis at maxmemory refuses an admission before the script writes
//     anything; that and every other error gets the failure policy.
//
// When Redis fails (an error, or no answer within Timeout), the failure
// policy decides: [FailLocal], the default, answers with an in-process
// token bucket per key, each instance enforcing its share of the limit
// ([LocalInstances]); [FailClosed] answers 503
// {"code":503,"message":"Service temporarily unavailable, please try again later"};
// [FailOpen] lets the request through. A circuit breaker per Redis node
// ([Breaker]) stops calling a failing Redis and answers at once, so an
// outage is answered within Timeout and decisions come from Redis again
// within about half a second of its return. When this process cannot get a
// decision to a healthy Redis in time ([ErrSaturated]), the request is
// refused with 503 under every policy and the breaker stays as it is: only
// Redis grants while Redis is healthy. The in-process limiter of FailLocal
// continues from what Redis last said of each key, never from a full
// budget: see [FailLocal]. A request whose own context ends before Redis
// answers ([ErrClientGone]) is decided by nobody: it is aborted with 499
// and its handler never runs.
//
// Under FailOpen and FailClosed the response carries RateLimit-Policy but
// no counters; in every case the decision's Err is set and the error is
// logged through log/slog at warn level, at most one line per limiter every
// 5 seconds. Errors and log lines name the route template and the rule,
// never the key or the identity; a debug line about a refused request tells
// clients apart by a short keyed hash (the one [HashIdentities] puts into
// keys, when it is on). No internal error text ever reaches a response
// body.
//
// Misconfiguration never passes silently: [New] returns an error and
// [Limiter.RateLimit] and [RateLimit] panic at start-up, naming the option.
// What can only be checked on a request, such as a package-level
// [RateLimit] with no limiter before it and no Redis of its own, answers
// 500 and logs the cause and the fix.
package ginlimit

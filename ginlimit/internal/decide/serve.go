package decide

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// Serve is the gin handler of a compiled policy. The rate rules are
// decided first; a request they admit then takes its slots of the
// in-flight rules (takeSlots), holds them while the rest of the chain
// runs, and gives them back when it returns.
func (p *Route) Serve(c *gin.Context) {
	out := answers{p}
	p.Fleet.Touch()
	p.Seen.note(c)
	req := p.newRequest(requestScope(c))
	failed, err := req.prepare(c)
	var slots *request
	if err == nil && len(p.Slots) > 0 {
		slots = p.newSlotRequest(req.scope)
		failed, err = slots.prepareSlots(c)
	}
	if err != nil {
		out.identityFailed(c, req.scope, failed, err)
		return
	}
	ctx := c.Request.Context()
	var start time.Time
	if len(p.Observers) > 0 {
		start = time.Now()
	}
	final := req
	if len(p.Rules) > 0 {
		var err error
		req.d, err = req.decide(ctx)
		c.Set(decisionKey{}, &req.d)
		out.answer(c, req, err)
	}
	var held *holding
	if slots != nil && !c.IsAborted() {
		var err error
		held, err = slots.takeSlots(ctx)
		if held != nil {
			// Released however serve ends: a panic in a hook or an
			// observer below would otherwise leave the slot renewed for
			// ever.
			defer held.release()
		}
		if err == nil && !slots.d.Allowed && p.bans {
			// An in-flight refusal is a strike for every Ban of the route,
			// reported now, so that a ban it makes holds on the very next
			// request, on any instance.
			p.reportStrikes(ctx, req.calls, 1)
		}
		// An admission by every in-flight rule leaves the rate rules'
		// decision and headers as they are; anything else is the answer.
		if len(p.Rules) == 0 || !slots.d.Allowed || err != nil {
			final = slots
			c.Set(decisionKey{}, &slots.d)
			out.answer(c, slots, err)
		}
	}
	if len(p.Observers) > 0 {
		out.observe(ctx, req.scope.Label(), final, time.Since(start))
	}
	if held != nil {
		c.Next() // the rest of the chain runs while the slots are held
	}
}

// Allow decides one request for key at cost n on every rate rule, outside
// gin: ginlimit's Policy.Allow.
func (p *Route) Allow(ctx context.Context, key string, n int) (Decision, error) {
	if len(p.Slots) > 0 {
		return Decision{}, errAllowInFlight
	}
	var start time.Time
	if len(p.Observers) > 0 {
		start = time.Now()
	}
	p.Fleet.Touch()
	req := p.newRequest(rule.Scope{Route: key})
	for i, r := range p.Rules {
		req.setCall(i, r, nil, n)
	}
	d, err := req.decide(ctx)
	if len(p.Observers) > 0 {
		req.d = d
		out := answers{p}
		out.observe(ctx, "", req, time.Since(start)) // Event.Route is "" outside gin
	}
	return d, err
}

// answers is a route as the writer of what its requests get: the
// bodies, the headers, the debug lines and the observers.
type answers struct{ *Route }

// Every answer of a limited route is written here: the 401, 429, 500 and
// 503 bodies, the rate limit headers, shadow mode, and the Respond
// function, which sees every 429.

// Response bodies that carry no configuration. Internal error text never goes
// into a body; it goes to the log. A rule's 429 body is precomputed
// (rule.body429).
const (
	bodyUnauthorized = `{"code":401,"message":"Authentication required"}`
	bodyUnavailable  = `{"code":503,"message":"Service temporarily unavailable, please try again later"}`
	bodyInternal     = `{"code":500,"message":"Internal server error"}`
	contentTypeJSON  = "application/json; charset=utf-8"
)

// Header names in canonical form, so they can be assigned to the header map
// directly, without canonicalising them on every request.
const (
	hdrRateLimit       = "Ratelimit"
	hdrRateLimitPolicy = "Ratelimit-Policy"
	hdrLimit           = "X-Ratelimit-Limit"
	hdrRemaining       = "X-Ratelimit-Remaining"
	hdrReset           = "X-Ratelimit-Reset"
	hdrRetryAfter      = "Retry-After"
)

// answer writes what a decided request gets:
//
//   - Redis could not decide: the failure policy (on down the chain, or 503)
//     with RateLimit-Policy but no counters; under FailLocal the fallback
//     decided, and the answer is as for any decision;
//   - a cost no rule can admit: a 429 that says so, without counters;
//   - otherwise the headers, then on down the chain or a 429.
//
// In shadow mode nothing is refused.
func (p answers) answer(c *gin.Context, req *request, err error) {
	d := &req.d
	if d.decider != nil {
		d.Message = d.decider.Message
	}
	if d.Reason != "" {
		d.Message = d.Reason
	}
	if errors.Is(err, engine.ErrClientGone) {
		p.clientGone(c, req)
		return
	}
	if err != nil {
		if outage(d.brk) && !errors.Is(err, engine.ErrSaturated) {
			// Redis is failing: the outage is logged when it starts, with
			// its cause, and when it ends (OutageLog), not per request.
			p.debug(c, req, "ginlimit: Redis could not decide; applying the failure policy")
		} else {
			// An error reply (WRONGTYPE on one key), or a saturated
			// process: no outage says it.
			p.Logs.Log(c.Request.Context(), p.Logger, slog.LevelWarn, "ginlimit: Redis could not decide; applying the failure policy",
				slog.String("rule", d.Rule), slog.String("policy", string(p.OnFail)), ErrAttr(err))
		}
		if !d.Local {
			// No counters: a route's rate rules may have set them before
			// its in-flight step failed.
			h := c.Writer.Header()
			delete(h, hdrRateLimit)
			delete(h, hdrLimit)
			delete(h, hdrRemaining)
			delete(h, hdrReset)
			if p.Headers.ietf() {
				h[hdrRateLimitPolicy] = []string{p.policyFor(req)}
			}
			if !d.Allowed {
				if !p.Shadow && p.Headers != HeadersNone {
					h[hdrRetryAfter] = []string{strconv.FormatInt(p.retryUnavailable(), 10)}
				}
				p.refuse(c, req, http.StatusServiceUnavailable, []byte(bodyUnavailable))
			}
			return
		}
	}
	if d.Reason != "" {
		p.refuse(c, req, http.StatusTooManyRequests, []byte(`{"code":429,"message":`+strconv.Quote(d.Reason)+`}`))
		return
	}
	if !d.Allowed && p.Shadow {
		d.Shadow = true
	}
	p.writeHeaders(c.Writer.Header(), req)
	if !d.Allowed {
		p.refuse(c, req, http.StatusTooManyRequests, d.decider.Body429)
	}
}

// outage reports whether brk, a decision's breaker, has counted Redis
// failures in a row or is open: the outage the engine reports to
// OutageLog. Without a breaker, there is no knowing.
func outage(brk *engine.Breaker) bool {
	return brk != nil && (brk.Failures() > 0 || brk.State() != "closed")
}

// retryUnavailable is the Retry-After, in seconds, of a 503 (FailClosed, or
// a saturated process): the route's breaker open time (DefaultBreakerOpen),
// rounded up to a whole second, and at least 1. A dead Redis's breaker
// lets its next probe through by then, so a client that waits that long
// meets Redis again as soon as it answers, and no sooner; a saturated
// process has had that long to drain.
func (p answers) retryUnavailable() int64 {
	return max(1, rule.CeilSeconds(p.BreakOpen))
}

// refuse answers a refused request: in shadow mode it lets the request
// through and says so in the decision; otherwise the Respond handler sees
// every 429, and the chain is aborted.
func (p answers) refuse(c *gin.Context, req *request, code int, body []byte) {
	d := &req.d
	if p.Shadow {
		d.Shadow = true
		p.debug(c, req, "ginlimit: shadow mode let through a request it would have refused")
		return
	}
	if code == http.StatusTooManyRequests {
		p.debug(c, req, "ginlimit: request limited")
		if p.Respond != nil {
			p.Respond(c, *d)
		}
	}
	if !c.Writer.Written() {
		c.Data(code, contentTypeJSON, body)
	}
	c.Abort()
}

// statusClientClosedRequest is what a request whose client has gone is
// aborted with: nginx's 499 Client Closed Request, which access logs and
// dashboards already know. Nobody reads it: the client has gone.
const statusClientClosedRequest = 499

// clientGone answers a request whose own context ended before Redis
// decided it (engine.ErrClientGone): aborted with 499, no body and no rate limit
// headers, so its handler never runs. Hooks do not see it (it is no
// refusal, and Redis did not fail). In shadow mode, which changes nothing,
// it goes on down the chain as it would without the limiter.
func (p answers) clientGone(c *gin.Context, req *request) {
	if p.Shadow {
		req.d.Shadow = true
		return
	}
	p.debug(c, req, "ginlimit: the request's context ended before Redis decided; aborting it with 499")
	c.AbortWithStatus(statusClientClosedRequest)
}

// identityFailed answers a request in scope s whose identity rule r could
// not find: 401 when it is unauthenticated, 500 (and a log line) otherwise.
func (p answers) identityFailed(c *gin.Context, s rule.Scope, r *rule.Base, err error) {
	if errors.Is(err, identity.ErrUnauthenticated) {
		if ch, ok := r.Users.(interface{ Challenge() string }); ok {
			challenge := ch.Challenge()
			if c.GetHeader("Authorization") != "" {
				// RFC 6750 section 3: a token was sent but is not valid.
				challenge += ` error="invalid_token"`
			}
			c.Header("WWW-Authenticate", challenge)
		}
		abortJSON(c, http.StatusUnauthorized, bodyUnauthorized)
		p.unauthorized(c, s, r, err)
		return
	}
	var missing rule.Missing
	if errors.As(err, &missing) && missing.D.Kind != rule.KindParam {
		// The request lacks what the rule counts per: it is never put in a
		// shared bucket.
		abortJSON(c, http.StatusBadRequest, missing.D.Body400())
		return
	}
	p.Logs.Log(c.Request.Context(), p.Logger, slog.LevelError, "ginlimit: no identity for the request; answering 500",
		slog.String("rule", r.Name), slog.String("route", c.FullPath()), ErrAttr(err))
	abortJSON(c, http.StatusInternalServerError, bodyInternal)
}

func abortJSON(c *gin.Context, code int, body string) {
	c.Data(code, contentTypeJSON, []byte(body))
	c.Abort()
}

// policyFor is the RateLimit-Policy value of req: every rule's item, with
// the limits of the plans and overrides the request's rules resolved to
// and the partition keys of its hashed identities (appendPK). On a route
// with plans or overrides it lists the rules of the request's step: its
// rate rules, or its in-flight rules.
func (p answers) policyFor(req *request) string {
	perRequest := p.planned || p.view.Load() != nil // a plan's or an override's limits
	switch {
	case !perRequest && !p.partitioned:
		return p.policyHeader
	case perRequest && !p.partitioned && len(req.calls) == 1:
		return req.calls[0].rule.PolicyHeader
	}
	b := make([]byte, 0, len(p.policyHeader)+48)
	add := func(r *rule.Base) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, r.PolicyHeader...)
		b = appendPK(b, p.partition(req, r))
	}
	switch {
	case !perRequest:
		for _, r := range p.All {
			add(r.Core())
		}
	case req.inFlight():
		for _, r := range p.Slots {
			add(&r.Base)
		}
	default:
		for _, cl := range req.calls {
			add(&cl.rule.Base)
		}
	}
	return string(b)
}

// appendPK appends the IETF draft's partition key parameter of a rule
// that hashes the identity it counts (HashIdentities), for part, its
// partition in a request (answers.partition): ";pk=:" and the base64 of
// the 128-bit HMAC that stands for the identity in the key. It is keyed
// with the rule's secret, so it names the client's count the same way on
// every instance and across restarts, and tells nothing of the identity.
// A rule without a secret sends no pk (part is ""): there is no key that
// is both secret and the same on every instance, and an unkeyed hash of
// an IP address or a user id is undone by trying every value. A rule
// whose count the request does not hold (an in-flight rule on the rate
// rules' answer) sends none either.
func appendPK(b []byte, part string) []byte {
	var raw [rule.HashHex / 2]byte
	if part == "" {
		return b
	}
	if _, err := hex.Decode(raw[:], []byte(part)); err != nil {
		return b
	}
	b = append(b, ";pk=:"...)
	b = base64.StdEncoding.AppendEncode(b, raw[:])
	return append(b, ':')
}

// partition is the partition of rule r's key in req (rule.Base.Partition),
// for its pk (appendPK): "" when r hashes no identity, or req holds no key
// of r.
func (p answers) partition(req *request, r *rule.Base) string {
	if r.HashKey == nil || len(r.Dims) == 0 {
		return ""
	}
	return r.Partition(p.keyOf(req, r))
}

// keyOf is rule r's key in req: a rate rule's, its Ban's or its plan's in
// a request of the rate rules, an in-flight rule's in the in-flight
// step's; "" when req holds none.
func (p answers) keyOf(req *request, r *rule.Base) string {
	if req.inFlight() {
		for i, s := range p.Slots {
			if &s.Base == r && i < len(req.keys) {
				return req.keys[i]
			}
		}
		return ""
	}
	for i := range req.calls {
		cl := &req.calls[i]
		if &cl.rule.Base == r || cl.rule.Ban != nil && &cl.rule.Ban.Base == r {
			return cl.key
		}
	}
	return ""
}

// writeHeaders sets the IETF RateLimit fields, the X-RateLimit-* fields and,
// on a refusal, Retry-After. RateLimit lists every rule when the decision
// has Rules, and otherwise the rule that decided. The values live in req,
// which is never written again once they are set.
func (p answers) writeHeaders(h http.Header, req *request) {
	if p.Headers == HeadersNone {
		return
	}
	d := &req.d
	b := req.buf[:0]
	if d.Rules != nil {
		for i := range d.Rules {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPK(appendRateLimit(b, d.Rules[i].decider, &d.Rules[i]), p.partition(req, d.Rules[i].decider))
		}
	} else {
		b = appendPK(appendRateLimit(b, d.decider, d), p.partition(req, d.decider))
	}
	rl := len(b)
	b = strconv.AppendInt(b, int64(d.Remaining), 10)
	remaining := len(b)
	b = strconv.AppendInt(b, unixCeil(d), 10)
	reset := len(b)
	if !d.Allowed {
		b = strconv.AppendInt(b, max(1, rule.CeilSeconds(d.RetryAfter)), 10)
	}
	str := rule.UnsafeString(b) // b is never written again
	v := &req.vals
	v[0], v[1], v[2], v[3], v[4], v[5] = str[:rl], p.policyFor(req), d.decider.LimitText, str[rl:remaining], str[remaining:reset], str[reset:]
	if p.Headers.ietf() {
		h[hdrRateLimit] = v[0:1:1]
		h[hdrRateLimitPolicy] = v[1:2:2]
	}
	if p.Headers.legacy() {
		h[hdrLimit] = v[2:3:3]
		h[hdrRemaining] = v[3:4:4]
		h[hdrReset] = v[4:5:5]
	}
	if !d.Allowed && !d.Shadow {
		h[hdrRetryAfter] = v[5:6:6]
	}
}

// appendRateLimit appends rule r's item of the RateLimit field for d.
func appendRateLimit(b []byte, r *rule.Base, d *Decision) []byte {
	b = append(b, r.QuotedName...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(d.Remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, rule.CeilSeconds(d.Reset), 10)
}

// unixCeil is the Unix time, in seconds rounded up, when more quota becomes
// available.
func unixCeil(d *Decision) int64 {
	us := d.Time.UnixMicro() + d.Reset.Microseconds()
	return (us + 999_999) / 1_000_000
}

// debug logs a refusal at debug level, when that level is enabled, at most
// one line per route every few seconds (with a count of the ones dropped),
// so a flood does not flood the log. It names the rule and the route, and
// the identity only by a short keyed hash (see who.logTag).
func (p answers) debug(c *gin.Context, req *request, msg string) {
	ctx := c.Request.Context()
	if !p.debugEnabled(ctx) {
		return
	}
	d := &req.d
	attrs := []slog.Attr{slog.String("rule", d.Rule), slog.String("route", c.FullPath()), slog.Duration("retry_after", d.RetryAfter)}
	if r := d.decider; r != nil {
		// The request's identity is found again, for this line only:
		// keeping it, or its tag, for every request would cost each one
		// for the few that a debug line is written about.
		var w rule.Who
		if r.Identify(c, &w) == nil {
			if tag := w.LogTag(r, p.Secret); tag != "" {
				attrs = append(attrs, slog.String("identity", tag))
			}
		}
	}
	p.debugLogs.Log(ctx, p.Log(), slog.LevelDebug, msg, attrs...)
}

// debugEnabled reports whether the policy's logger writes debug lines now.
func (p answers) debugEnabled(ctx context.Context) bool {
	return p.Log().Enabled(ctx, slog.LevelDebug)
}

// unauthorized tells p's observers that rule r found no valid identity
// for the request of c (err wraps identity.ErrUnauthenticated), and logs
// it at debug level: at most one line per reason per LogEvery on the
// route, so that a wrong secret, which fails every request, shows without
// flooding the log. The line and the Event carry the reason, never err's
// text, which a User of the application's own may fill with the identity.
func (p answers) unauthorized(c *gin.Context, s rule.Scope, r *rule.Base, err error) {
	ctx := c.Request.Context()
	reason := identity.Reason(err)
	if p.debugEnabled(ctx) {
		t, _ := p.authLogs.LoadOrStore(reason, &LogThrottle{})
		t.(*LogThrottle).Log(ctx, p.Log(), slog.LevelDebug, "ginlimit: no valid identity for the request; answering 401",
			slog.String("rule", r.Name), slog.String("route", c.FullPath()), slog.String("reason", reason))
	}
	if len(p.Observers) == 0 {
		return
	}
	e := Event{Route: s.Label(), Rule: r.Name, Outcome: OutcomeUnauthorized, Decision: Decision{Rule: r.Name}, Reason: reason}
	for _, o := range p.Observers {
		o(ctx, e)
	}
}

// observe tells p's observers about req's decision.
func (p answers) observe(ctx context.Context, route string, req *request, latency time.Duration) {
	d := &req.d
	e := Event{Route: route, Rule: d.Rule, Outcome: outcomeOf(*d), Decision: *d, Latency: latency}
	if !d.Allowed {
		e.key = req.keyOf(d.decider)
	}
	switch {
	case d.brk != nil:
		e.Breaker = d.brk.State()
	default:
		e.Breaker = p.Engine.Breaker().State()
	}
	for _, o := range p.Observers {
		o(ctx, e)
	}
}

// maxSeenRoutes bounds the routes a Policy notes: a group's Use can put one
// Policy on many routes, but not on more than an application declares.
const maxSeenRoutes = 1024

// Seen is the routes a Policy has served, "<METHOD> <template>",
// swapped whole: a request reads it without a lock, and adds to it only
// on its route's first request.
type Seen struct {
	list atomic.Pointer[[]string]
	mu   sync.Mutex
}

// note adds c's route, unless known (or it matched none).
func (s *Seen) note(c *gin.Context) {
	path := c.FullPath()
	if path == "" {
		return
	}
	method := c.Request.Method
	if l := s.list.Load(); l != nil && hasRoute(*l, method, path) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []string
	if old := s.list.Load(); old != nil {
		l = *old
	}
	if hasRoute(l, method, path) || len(l) >= maxSeenRoutes {
		return
	}
	l = append(slices.Clip(l), method+" "+path)
	s.list.Store(&l)
}

// Routes returns the routes noted so far.
func (s *Seen) Routes() []string {
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// hasRoute reports whether routes holds "<method> <path>", without
// building it.
func hasRoute(routes []string, method, path string) bool {
	for _, r := range routes {
		if len(r) == len(method)+1+len(path) && r[:len(method)] == method && r[len(method)+1:] == path {
			return true
		}
	}
	return false
}

package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
)

// multiScript decides several rules atomically, all or nothing.
var multiScript = redis.NewScript(lua.Multi())

// Rule adds one rule to a route that enforces several at once, for example
// 10 per second and 1,000 per hour, or per IP and per user together:
//
//	ginlimit.RateLimit(ginlimit.Key("api:"),
//		ginlimit.Rule(ginlimit.Name("burst"), ginlimit.Window(time.Second), ginlimit.Limit(10)),
//		ginlimit.Rule(ginlimit.Name("hourly"), ginlimit.Window(time.Hour), ginlimit.Limit(1000), ginlimit.Type(ginlimit.User)))
//
// The options outside the Rules apply to every rule; each Rule's own
// options apply on top, for that rule only. Options that concern the whole
// route (Redis, Timeout, OnFailure, Logger, DenyCache, AutoPipeline) are
// rejected inside a Rule. Each rule needs a distinct [Name], which the
// headers list and a 429 names.
//
// One script call decides all the rules, atomically and all or nothing: a
// request is admitted only if every rule admits it, and a request rejected by
// one rule consumes nothing from the others. The keys of one route share a
// Redis Cluster hash tag, the route template, so they live in one slot:
//
//	<prefix>{<METHOD> <route template>} rule:<name>[ ip:<addr>| user:<id>]
//
// The deny cache does not apply to several-rule routes yet.
func Rule(opts ...Option) Option {
	opts = slices.Clone(opts)
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(Rule(...)): rules do not nest")
			return
		}
		s.rules = append(slices.Clip(s.rules), opts)
	})
}

// compileMulti compiles a route with Rule options: the route's own policy
// carries what is shared, and one child policy per rule carries the rest.
func compileMulti(s settings, logs *logThrottle) (*Policy, error) {
	rules := s.rules
	s.rules = nil
	if s.tierLimits != nil {
		return nil, errors.New("ginlimit: Tiers: not supported on routes with several Rules")
	}
	parent, err := compile(s, logs)
	if err != nil {
		return nil, err
	}
	parent.deny = nil
	parent.pipe = nil
	names := map[string]bool{}
	for i, opts := range rules {
		rs := s
		rs.errs, rs.inRule, rs.name = nil, true, ""
		for _, o := range opts {
			o.apply(&rs)
		}
		rs.inRule = false
		if rs.name == "" {
			return nil, fmt.Errorf("ginlimit: Rule %d: give each rule of a route a Name", i+1)
		}
		if names[rs.name] {
			return nil, fmt.Errorf("ginlimit: Rule %d: the name %q is used twice", i+1, rs.name)
		}
		names[rs.name] = true
		rs.deny, rs.autoPipeline, rs.breakFailures = 0, false, 0
		child, err := compile(rs, logs)
		if err != nil {
			return nil, fmt.Errorf("ginlimit: Rule %d (%s): %w", i+1, rs.name, err)
		}
		parent.rules = append(parent.rules, child)
	}
	var pol []string
	for _, r := range parent.rules {
		pol = append(pol, r.policyHeader)
	}
	parent.policyHeader = strings.Join(pol, ", ")
	return parent, nil
}

// multiKeys returns each rule's Redis key for the hash tag tag ("{...}")
// and the per-rule dimensions.
func (p *Policy) multiKeys(tag string, dims []string) []string {
	keys := make([]string, len(p.rules))
	for i, r := range p.rules {
		var b strings.Builder
		b.WriteString(r.prefix)
		b.WriteString(tag)
		b.WriteString(" rule:")
		writeEscaped(&b, r.name, idSafe)
		b.WriteString(dims[i])
		keys[i] = b.String()
	}
	return keys
}

// decideMulti decides every rule of p at once.
func (p *Policy) decideMulti(ctx context.Context, keys []string, costs []int) (Decision, error) {
	args := make([]any, 0, 1+5*len(p.rules))
	if p.clock != nil {
		args = append(args, p.clock())
	} else {
		args = append(args, "")
	}
	for i, r := range p.rules {
		cost := max(costs[i], 1)
		if cost > r.maxCost {
			return Decision{
				Rule: r.name, Limit: r.limit,
				Reason: "the request costs " + strconv.Itoa(cost) + ", more than rule " + r.name + " can ever admit (" + strconv.Itoa(r.maxCost) + ")",
			}, nil
		}
		args = append(args, int(r.alg), r.window.Microseconds(), r.limit, r.param, cost)
	}
	probe := false
	var brk *breaker
	if p.brk != nil {
		brk = p.brk.forKey(ctx, keys[0]) // every key of the call is in one slot
		var ok bool
		if ok, probe = brk.allow(); !ok {
			return p.failedMulti(keys, costs, ErrCircuitOpen)
		}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	reply, err := runScript(ctx, p.honours, multiScript, p.client, keys, args)
	var d Decision
	if err == nil {
		d, err = p.parseMulti(reply)
	}
	if brk != nil {
		brk.done(probe, err != nil && parent.Err() == nil && unavailable(err))
	}
	if err != nil {
		return p.failedMulti(keys, costs, err)
	}
	return d, nil
}

// failedMulti is the decision and error when Redis could not decide the
// rules: the failure policy's, or the in-process fallback's for FailLocal.
func (p *Policy) failedMulti(keys []string, costs []int, err error) (Decision, error) {
	err = fmt.Errorf("ginlimit: rules %q: %w", keys, err)
	if p.onFail == FailLocal {
		d := p.decideLocal(keys, costs, p.rules)
		d.Err = err
		return d, err
	}
	return Decision{Rule: p.name, Allowed: p.onFail == FailOpen, Limit: p.limit, Err: err}, err
}

// parseMulti converts {allowed, now_us, fired, then per rule: allowed,
// remaining, reset_us, retry_us}. The decision is the firing rule's (with
// the longest retry among the rules that rejected) or, when admitted, the
// rule with the least remaining; Rules holds every rule's.
func (p *Policy) parseMulti(reply []any) (Decision, error) {
	if len(reply) != 3+4*len(p.rules) {
		return Decision{}, fmt.Errorf("unexpected reply of %d elements", len(reply))
	}
	n := make([]int64, len(reply))
	for i, v := range reply {
		x, ok := v.(int64)
		if !ok {
			return Decision{}, fmt.Errorf("unexpected reply element %d of type %T", i, v)
		}
		n[i] = x
	}
	now := time.UnixMicro(n[1])
	fired := int(n[2])
	rules := make([]Decision, len(p.rules))
	var retry time.Duration
	best := 0
	for i, r := range p.rules {
		v := n[3+4*i:]
		rules[i] = Decision{
			Rule:      r.name,
			Allowed:   fired == 0,
			Limit:     r.limit,
			Remaining: int(max(v[1], 0)),
			Reset:     time.Duration(v[2]) * time.Microsecond,
			Time:      now,
		}
		if v[0] == 0 {
			rules[i].RetryAfter = time.Duration(v[3]) * time.Microsecond
			retry = max(retry, rules[i].RetryAfter)
		}
		if rules[i].Remaining < rules[best].Remaining {
			best = i
		}
	}
	if fired > 0 {
		if fired > len(p.rules) {
			return Decision{}, fmt.Errorf("unexpected firing rule %d", fired)
		}
		best = fired - 1
	}
	d := rules[best]
	if fired > 0 {
		d.RetryAfter = retry
	}
	d.Rules = rules
	return d, nil
}

// serveMulti is the gin handler of a route with several rules.
func (p *Policy) serveMulti(c *gin.Context) {
	method, route := c.Request.Method, c.FullPath()
	var tb strings.Builder
	tb.WriteByte('{')
	writeEscaped(&tb, method, routeSafe)
	tb.WriteByte(' ')
	writeEscaped(&tb, route, routeSafe)
	tb.WriteByte('}')
	dims := make([]string, len(p.rules))
	costs := make([]int, len(p.rules))
	for i, r := range p.rules {
		dim, err := r.dimension(c)
		if err != nil {
			r.identityFailed(c, err)
			return
		}
		dims[i] = dim
		costs[i] = r.cost
		if r.costFunc != nil {
			costs[i] = r.costFunc(c)
		}
	}
	start := time.Now()
	d, err := p.decideMulti(c.Request.Context(), p.multiKeys(tb.String(), dims), costs)
	if len(p.observers) > 0 {
		defer func() { p.observe(c.Request.Context(), routeLabel(method, route), &d, time.Since(start)) }()
	}
	c.Set(decisionKey{}, &d)
	if p.answeredWithout(c, &d, err) {
		return
	}
	h := c.Writer.Header()
	ietf, legacy := p.headers == HeadersBoth || p.headers == HeadersIETF, p.headers == HeadersBoth || p.headers == HeadersLegacy
	if ietf {
		h.Set(hdrRateLimitPolicy, p.policyHeader)
	}
	if d.Rules != nil && ietf { // a fallback decision knows only the rule that decided
		var rl []string
		for i, r := range p.rules {
			rd := d.Rules[i]
			rl = append(rl, r.quotedName+";r="+strconv.Itoa(rd.Remaining)+";t="+strconv.FormatInt(ceilSeconds(rd.Reset), 10))
		}
		h.Set(hdrRateLimit, strings.Join(rl, ", "))
	}
	if legacy {
		h.Set(hdrLimit, strconv.Itoa(d.Limit))
		h.Set(hdrRemaining, strconv.Itoa(d.Remaining))
		h.Set(hdrReset, strconv.FormatInt(unixCeil(&d), 10))
	}
	if !d.Allowed && p.shadow {
		p.shadowed(c, &d)
		return
	}
	if !d.Allowed {
		if p.headers != HeadersNone {
			h.Set(hdrRetryAfter, strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10))
		}
		for _, r := range p.rules {
			if r.name == d.Rule {
				body := strings.TrimSuffix(string(r.body429), "}") + `,"rule":` + strconv.Quote(r.name) + `}`
				p.refuse(c, &d, []byte(body))
				return
			}
		}
	}
}

// dimension returns the identity part of the request's key for p's type:
// "", " ip:<addr>" or " user:<id>", escaped.
func (p *Policy) dimension(c *gin.Context) (string, error) {
	var buf [64]byte
	dim, id, safe, err := p.identify(c, &buf)
	if err != nil || dim == "" {
		return "", err
	}
	var b strings.Builder
	b.WriteString(dim)
	writeEscaped(&b, id, safe)
	return b.String(), nil
}

// identityFailed answers a request whose identity could not be found: 401
// when it is unauthenticated, 500 (and a log line) otherwise.
func (p *Policy) identityFailed(c *gin.Context, err error) {
	if errors.Is(err, identity.ErrUnauthenticated) {
		if ch, ok := p.users.(challenger); ok {
			challenge := ch.Challenge()
			if c.GetHeader("Authorization") != "" {
				// RFC 6750 section 3: a token was sent but is not valid.
				challenge += ` error="invalid_token"`
			}
			c.Header("WWW-Authenticate", challenge)
		}
		abortJSON(c, http.StatusUnauthorized, bodyUnauthorized)
		return
	}
	p.logs.log(c.Request.Context(), p.logger, slog.LevelError, "ginlimit: no identity for the request; answering 500",
		slog.String("rule", p.name), errAttr(err))
	abortJSON(c, http.StatusInternalServerError, bodyInternal)
}

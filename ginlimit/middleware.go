package ginlimit

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// Response bodies that carry no configuration. Internal error text never goes
// into a body; it goes to the log.
const (
	bodyUnauthorized = `{"code":401,"message":"Authentication required"}`
	bodyUnavailable  = `{"code":503,"message":"Service temporarily unavailable, please try again later"}`
	bodyInternal     = `{"code":500,"message":"Internal server error"}`
	contentTypeJSON  = "application/json; charset=utf-8"
)

func errAttr(err error) slog.Attr { return slog.String("error", err.Error()) }

func abortJSON(c *gin.Context, code int, body string) {
	c.Data(code, contentTypeJSON, []byte(body))
	c.Abort()
}

// identify returns the identity part of the request's key for p's type:
// the dimension (" ip:", " user:", " anon:" or "" for Method), the identity
// text and which bytes of it stand for themselves. buf backs the text of an
// IP address, so that no allocation is needed for it. With HashIdentities
// the text is an HMAC of the identity instead of the identity.
func (p *Policy) identify(c *gin.Context, buf *[64]byte) (dim, id string, safe func(byte) bool, err error) {
	switch p.typ {
	case Method:
		return "", "", nil, nil
	case IP:
		if dim, id, err = p.clientIP(c, buf, " ip:"); err != nil {
			return "", "", nil, err
		}
		safe = routeSafe
	case User:
		uid, uerr := p.users.UserID(c)
		switch {
		case uerr == nil:
			dim, id, safe = " user:", uid, idSafe
		case p.anonByIP && errors.Is(uerr, identity.ErrUnauthenticated):
			if dim, id, err = p.clientIP(c, buf, " anon:"); err != nil {
				return "", "", nil, err
			}
			safe = routeSafe
		default:
			return "", "", nil, uerr
		}
	}
	if p.hashKey != nil {
		id, safe = p.hashIdentity(dim, id), routeSafe
	}
	return dim, id, safe, nil
}

// clientIP resolves the client's address and its bucket text.
func (p *Policy) clientIP(c *gin.Context, buf *[64]byte, dim string) (string, string, error) {
	addr, err := p.ips.Resolve(c.Request)
	if err != nil {
		return "", "", err
	}
	if addr.Is4() {
		return dim, unsafeString(addr.AppendTo(buf[:0])), nil
	}
	return dim, unsafeString(p.ips.Bucket(addr).AppendTo(buf[:0])), nil
}

// challenger is implemented by user identities that know their
// WWW-Authenticate challenge, such as *identity.JWT.
type challenger interface{ Challenge() string }

// serve is the gin handler of a compiled policy.
func (p *Policy) serve(c *gin.Context) {
	if p.skip != nil && p.skip(c) {
		return
	}
	if p.rules != nil {
		p.serveMulti(c)
		return
	}
	if p.tiers != nil {
		p = p.tierFor(c)
	}
	key, err := p.requestKey(c)
	if err != nil {
		p.identityFailed(c, err)
		return
	}
	// One allocation holds what the rest of the request needs: the decision
	// the handler reads, the key slice go-redis takes, and the header values.
	sc := &scratch{}
	sc.keys[0] = key
	var d *Decision = &sc.d
	if len(p.observers) > 0 {
		start := time.Now()
		defer func() {
			p.observe(c.Request.Context(), routeLabel(c.Request.Method, c.FullPath()), d, time.Since(start))
		}()
	}
	cost := p.cost
	if p.costFunc != nil {
		cost = p.costFunc(c)
	}
	*d, err = p.decide(c.Request.Context(), sc.keys[:], cost)
	c.Set(decisionKey{}, d)
	h := c.Writer.Header()
	if p.answeredWithout(c, d, err) {
		return
	}
	if !d.Allowed && p.shadow {
		d.Shadow = true
	}
	p.writeHeaders(h, d, sc)
	if d.Shadow {
		p.shadowed(c, d)
		return
	}
	if !d.Allowed {
		p.refuse(c, d, p.body429)
	}
}

// refuse answers a request the rule refused: the OnLimited hook, then the
// Respond handler or the default 429 body, then abort.
func (p *Policy) refuse(c *gin.Context, d *Decision, body []byte) {
	p.debug(c, "ginlimit: request limited", d)
	if p.onLimited != nil {
		p.onLimited(c, *d)
	}
	if p.respond != nil {
		p.respond(c, *d)
		if !c.Writer.Written() {
			c.Data(http.StatusTooManyRequests, contentTypeJSON, body)
		}
		c.Abort()
		return
	}
	c.Data(http.StatusTooManyRequests, contentTypeJSON, body)
	c.Abort()
}

// answeredWithout answers the requests whose decision gives no counters: a
// Redis failure (the failure policy applies: 503 or on down the chain) and a
// cost no rule can admit (429 saying so). It reports whether it did.
func (p *Policy) answeredWithout(c *gin.Context, d *Decision, err error) bool {
	if err != nil {
		if p.onError != nil {
			p.onError(c, err)
		}
		if p.headers == HeadersBoth || p.headers == HeadersIETF {
			c.Writer.Header()[hdrRateLimitPolicy] = []string{p.policyHeader}
		}
		p.logs.log(c.Request.Context(), p.logger, slog.LevelWarn, "ginlimit: Redis could not decide; applying the failure policy",
			slog.String("rule", p.name), slog.String("policy", p.onFail.String()), errAttr(err))
		if d.Local {
			return false // the fallback decided: headers and 429 as usual
		}
		if !d.Allowed {
			if p.shadow {
				p.shadowed(c, d)
				return true
			}
			abortJSON(c, http.StatusServiceUnavailable, bodyUnavailable)
		}
		return true
	}
	if d.Reason != "" {
		if p.shadow {
			p.shadowed(c, d)
			return true
		}
		abortJSON(c, http.StatusTooManyRequests, `{"code":429,"message":`+strconv.Quote(d.Reason)+`}`)
		return true
	}
	return false
}

// shadowed lets through a request that would have been refused, in shadow
// mode: the decision says so, and a debug line is logged.
func (p *Policy) shadowed(c *gin.Context, d *Decision) {
	d.Shadow = true
	p.debug(c, "ginlimit: shadow mode let through a request it would have refused", d)
}

// debug logs a decision at debug level, when that level is enabled, at most
// one line per rule every few seconds (with a count of the ones dropped),
// so a flood does not flood the log. It names the rule and route, never the
// identity.
func (p *Policy) debug(c *gin.Context, msg string, d *Decision) {
	l := p.logger
	if l == nil {
		l = slog.Default()
	}
	ctx := c.Request.Context()
	if l.Enabled(ctx, slog.LevelDebug) {
		p.debugLogs.log(ctx, l, slog.LevelDebug, msg, slog.String("rule", d.Rule), slog.String("route", c.FullPath()),
			slog.Duration("retry_after", d.RetryAfter))
	}
}

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

// scratch is the per-request memory of a limited request.
type scratch struct {
	d    Decision
	keys [1]string
	vals [6]string
	buf  [96]byte
}

// writeHeaders sets the IETF RateLimit fields, the X-RateLimit-* fields and,
// on a rejection, Retry-After. The values live in sc, which is never written
// again once they are set.
func (p *Policy) writeHeaders(h http.Header, d *Decision, sc *scratch) {
	b := sc.buf[:0]
	remaining := strconv.Itoa(d.Remaining) // 0 to 99 need no allocation
	b = append(b, p.quotedName...)
	b = append(b, ";r="...)
	b = append(b, remaining...)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.Reset), 10)
	rl := len(b)
	b = strconv.AppendInt(b, unixCeil(d), 10)
	reset := len(b)
	if !d.Allowed {
		b = strconv.AppendInt(b, max(1, ceilSeconds(d.RetryAfter)), 10)
	}
	var str string
	if len(b) <= len(sc.buf) {
		str = unsafeString(b) // sc.buf is never written again
	} else {
		str = string(b) // a very long policy name outgrew sc.buf
	}
	v := &sc.vals
	v[0], v[1], v[2], v[3], v[4], v[5] = str[:rl], p.policyHeader, p.limitText, remaining, str[rl:reset], str[reset:]
	if p.headers == HeadersNone {
		return
	}
	if p.headers != HeadersLegacy {
		h[hdrRateLimit] = v[0:1:1]
		h[hdrRateLimitPolicy] = v[1:2:2]
	}
	if p.headers != HeadersIETF {
		h[hdrLimit] = v[2:3:3]
		h[hdrRemaining] = v[3:4:4]
		h[hdrReset] = v[4:5:5]
	}
	if !d.Allowed && !d.Shadow {
		h[hdrRetryAfter] = v[5:6:6]
	}
}

// unixCeil is the Unix time, in seconds rounded up, when more quota becomes
// available.
func unixCeil(d *Decision) int64 {
	us := d.Time.UnixMicro() + d.Reset.Microseconds()
	return (us + 999_999) / 1_000_000
}

// requestKey builds the Redis key of the request:
// <prefix>{<METHOD> <route template>[ <dimension>]}.
func (p *Policy) requestKey(c *gin.Context) (string, error) {
	method, route := c.Request.Method, c.FullPath()
	var buf [64]byte
	dim, id, idSafeFn, err := p.identify(c, &buf)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	n := len(p.prefix) + len(method) + escapedLen(route, routeSafe) + 3
	if dim != "" {
		n += len(dim) + escapedLen(id, idSafeFn)
	}
	b.Grow(n)
	b.WriteString(p.prefix)
	b.WriteByte('{')
	writeEscaped(&b, method, routeSafe)
	b.WriteByte(' ')
	writeEscaped(&b, route, routeSafe)
	if dim != "" {
		b.WriteString(dim)
		writeEscaped(&b, id, idSafeFn)
	}
	b.WriteByte('}')
	return b.String(), nil
}

package ginlimit

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

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

// challenger is implemented by user identities that know their
// WWW-Authenticate challenge, such as *identity.JWT.
type challenger interface{ Challenge() string }

// serve is the gin handler of a compiled policy.
func (p *Policy) serve(c *gin.Context) {
	key, err := p.requestKey(c)
	if err != nil {
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
		return
	}
	d, err := p.decide(c.Request.Context(), key)
	c.Set(decisionKey{}, d)
	h := c.Writer.Header()
	h.Set("RateLimit-Policy", p.policyHeader)
	if err != nil {
		p.logs.log(c.Request.Context(), p.logger, slog.LevelWarn, "ginlimit: Redis could not decide; applying the failure policy",
			slog.String("rule", p.name), slog.String("policy", p.onFail.String()), errAttr(err))
		if !d.Allowed {
			abortJSON(c, http.StatusServiceUnavailable, bodyUnavailable)
		}
		return
	}
	p.writeHeaders(h, d)
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10))
		c.Data(http.StatusTooManyRequests, contentTypeJSON, p.body429)
		c.Abort()
	}
}

// writeHeaders sets the IETF RateLimit field and the X-RateLimit-* fields.
func (p *Policy) writeHeaders(h http.Header, d Decision) {
	reset := ceilSeconds(d.Reset)
	remaining := strconv.Itoa(d.Remaining)
	h.Set("RateLimit", p.quotedName+";r="+remaining+";t="+strconv.FormatInt(reset, 10))
	h.Set("X-RateLimit-Limit", p.limitText)
	h.Set("X-RateLimit-Remaining", remaining)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(unixCeil(d), 10))
}

// unixCeil is the Unix time, in seconds rounded up, when more quota becomes
// available.
func unixCeil(d Decision) int64 {
	us := d.Time.UnixMicro() + d.Reset.Microseconds()
	return (us + 999_999) / 1_000_000
}

// requestKey builds the Redis key of the request:
// <prefix>{<METHOD> <route template>[ <dimension>]}.
func (p *Policy) requestKey(c *gin.Context) (string, error) {
	method, route := c.Request.Method, c.FullPath()
	var dim, id string
	var idSafeFn func(byte) bool
	switch p.typ {
	case IP:
		addr, err := p.ips.Resolve(c.Request)
		if err != nil {
			return "", err
		}
		dim, id, idSafeFn = " ip:", addr.String(), routeSafe
	case User:
		uid, err := p.users.UserID(c)
		if err != nil {
			return "", err
		}
		dim, id, idSafeFn = " user:", uid, idSafe
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

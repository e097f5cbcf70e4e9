package ginlimit

import (
	"fmt"

	"github.com/gin-gonic/gin"
)

// HeaderStyle says which rate limit headers a route sends.
type HeaderStyle int

const (
	// HeadersBoth sends the IETF RateLimit and RateLimit-Policy fields and
	// the X-RateLimit-* fields (the default).
	HeadersBoth HeaderStyle = iota
	// HeadersIETF sends only RateLimit and RateLimit-Policy.
	HeadersIETF
	// HeadersLegacy sends only X-RateLimit-Limit, -Remaining and -Reset.
	HeadersLegacy
	// HeadersNone sends no rate limit header at all, not even Retry-After:
	// OWASP's advice for login endpoints is not to tell an attacker how
	// many guesses are left.
	HeadersNone
)

// String returns the style's name.
func (h HeaderStyle) String() string {
	switch h {
	case HeadersBoth:
		return "HeadersBoth"
	case HeadersIETF:
		return "HeadersIETF"
	case HeadersLegacy:
		return "HeadersLegacy"
	case HeadersNone:
		return "HeadersNone"
	}
	return fmt.Sprintf("HeaderStyle(%d)", int(h))
}

// Headers chooses the rate limit headers. The default is [HeadersBoth].
func Headers(h HeaderStyle) Option {
	return optionFunc(func(s *settings) {
		if h < HeadersBoth || h > HeadersNone {
			s.invalid("Headers(%v): want HeadersBoth, HeadersIETF, HeadersLegacy or HeadersNone", h)
			return
		}
		s.headers = h
	})
}

// Skip exempts the requests for which skip returns true: they are counted
// nowhere and get no rate limit headers (health checks, internal networks,
// an allow-list of users). skip runs on every request of the route, before
// any identity is resolved, and must be safe for concurrent use.
func Skip(skip func(c *gin.Context) bool) Option {
	return optionFunc(func(s *settings) {
		if skip == nil {
			s.invalid("Skip(nil): the predicate must not be nil")
			return
		}
		s.skip = skip
	})
}

// OnLimited calls f for every request the route refuses with 429 (not for
// shadow mode's would-be refusals), before the response is written.
func OnLimited(f func(c *gin.Context, d Decision)) Option {
	return optionFunc(func(s *settings) {
		if f == nil {
			s.invalid("OnLimited(nil): the function must not be nil")
			return
		}
		s.onLimited = f
	})
}

// OnError calls f with the (wrapped) error whenever Redis could not decide
// for the route, whatever the failure policy then does.
func OnError(f func(c *gin.Context, err error)) Option {
	return optionFunc(func(s *settings) {
		if f == nil {
			s.invalid("OnError(nil): the function must not be nil")
			return
		}
		s.onError = f
	})
}

// Respond replaces the default 429 body: f writes the response for a
// refused request (for example the application's own envelope, or RFC 9457
// problem+json) and the chain is then aborted. The rate limit headers are
// already set when f runs; the decision is also in [DecisionFrom].
func Respond(f func(c *gin.Context, d Decision)) Option {
	return optionFunc(func(s *settings) {
		if f == nil {
			s.invalid("Respond(nil): the function must not be nil")
			return
		}
		s.respond = f
	})
}

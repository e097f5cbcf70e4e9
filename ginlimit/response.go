package ginlimit

import (
	"fmt"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
)

// HeaderStyle says which rate limit headers a route sends.
type HeaderStyle = decide.HeaderStyle

const (
	// HeadersBoth sends the IETF RateLimit and RateLimit-Policy fields and
	// the X-RateLimit-* fields (the default).
	HeadersBoth HeaderStyle = decide.HeadersBoth
	// HeadersIETF sends only RateLimit and RateLimit-Policy.
	HeadersIETF HeaderStyle = decide.HeadersIETF
	// HeadersLegacy sends only X-RateLimit-Limit, -Remaining and -Reset.
	HeadersLegacy HeaderStyle = decide.HeadersLegacy
	// HeadersNone sends no rate limit header at all, not even Retry-After:
	// OWASP's advice for login endpoints is not to tell an attacker how
	// many guesses are left.
	HeadersNone HeaderStyle = decide.HeadersNone
)

// Headers chooses the rate limit headers of the route. The default is
// [HeadersBoth].
func Headers(h HeaderStyle) Option {
	return routeOption(func(r *routeConfig) error {
		if h != HeadersBoth && h != HeadersIETF && h != HeadersLegacy && h != HeadersNone {
			return fmt.Errorf("Headers(%q): want HeadersBoth, HeadersIETF, HeadersLegacy or HeadersNone", string(h))
		}
		r.headers = h
		return nil
	})
}

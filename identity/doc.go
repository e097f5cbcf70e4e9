// Package identity turns an HTTP request into the identity a rate limit is
// counted against: the client's IP address, or the id of the authenticated
// user.
//
// # Client IP
//
// [IP] resolves the client address from the TCP peer (http.Request.RemoteAddr).
// X-Forwarded-For is read only when the peer is one of the configured trusted
// proxies; the list is then walked from the right, skipping trusted hops, and
// the first untrusted address is the client. Headers sent by anyone else are
// ignored, so a client cannot pick its own bucket. IPv4-mapped IPv6 addresses
// (::ffff:192.0.2.1) are reported as IPv4, and zones are dropped.
//
// # User
//
// A [User] resolves the user id. [JWT] verifies a bearer token with
// golang-jwt v5: only the algorithms of the configured keys are accepted (so
// "alg": "none" and HMAC/RSA confusion are rejected), exp is required and exp
// and nbf are checked with a small leeway, and the id is read from a claim
// (sub by default; strings and integers both work). Keys come from an HMAC
// secret, public keys, or a JSON Web Key Set chosen by the token's kid
// ([JWKS]); weak RSA keys in a set are refused when it is loaded.
//
// # Remote JWKS
//
// [RemoteJWKS] fetches the set from the identity provider's URL (with
// github.com/MicahParks/jwkset) and vets it with the same parser as [JWKS],
// so a set holding one weak or malformed key is refused whole. A single
// goroutine per verifier refetches it every [RefreshInterval], after a
// failure with a back-off (1 s doubling to a minute), and when a token
// names a kid the set lacks, at most once per [UnknownKIDRefetch]; requests
// never wait on the network. A failed fetch keeps the last good set. At
// start-up [NewJWT] waits at most [StartupTimeout]; if the provider is down
// it starts with no set (such tokens get 401) and keeps trying, unless
// [RequireStartupFetch] is given. [JWT.Close] stops the goroutine.
// [FromContext] reads an id that the application's own authentication
// middleware stored in the gin context.
//
// Every failure to find a user wraps [ErrUnauthenticated]; callers answer it
// with 401 and never fall back to a shared "anonymous" identity.
package identity

package ginlimit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// A rule's dimension is what its limit is counted per. A new dimension is
// its constructor here, and its Kind, constructor and cases in Identify
// and TargetWho in internal/rule, where every key is built.

// Type is an alias of [Per](t), keys included: the Java annotation's spelling.
func Type(t Dimension) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if t == nil {
			return errors.New("Type(nil): want Method, IP, User, UserOrIP, Shared or a dimension of ByParam, ByHeader or ByFunc")
		}
		return setDims(r, "Type", []Dimension{t})
	})
}

// IPIdentity sets how the client IP of an [IP] rule is found, in particular
// which proxies are trusted to send X-Forwarded-For. By default no proxy is
// trusted and the client is the TCP peer.
func IPIdentity(ip *identity.IP) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if ip == nil {
			return errors.New("IPIdentity(nil): the resolver must not be nil")
		}
		r.IPs = ip
		return nil
	})
}

// UserIdentity sets how the user of a [User] rule is found, for example
// identity.NewJWT(...) or identity.FromContext("user_id"). A [User] rule
// without it is a configuration error. Different rules of one route may
// count different identities, for example the user from a JWT and the
// tenant from identity.FromContext("tenant").
func UserIdentity(u identity.User) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if u == nil {
			return errors.New("UserIdentity(nil): the resolver must not be nil")
		}
		r.Users = u
		return nil
	})
}

// HashIdentities puts an HMAC-SHA256 of each identity (keyed with secret,
// which must be at least 32 bytes) into Redis keys instead of the raw IP
// address or user id, so no personal data sits in Redis: a key then reads
// "user:<32 hex digits>". Keep secret stable across instances and restarts,
// or every identity gets a fresh bucket. The default is off.
func HashIdentities(secret []byte) RuleOption {
	secret = append([]byte(nil), secret...)
	return ruleOption(func(r *rule.Config) error {
		if len(secret) < 32 {
			return fmt.Errorf("HashIdentities: the secret is %d bytes, want at least 32", len(secret))
		}
		r.HashKey = secret
		return nil
	})
}

// Dimension is one thing a rule can count per: the user, the client IP, a
// path parameter, a header, or a function of the request. Give one to
// [Per], one or several; every combination of their values gets a
// count of its own. The Dimensions are [Method], [IP], [User],
// [UserOrIP] and [Shared], and those [ByParam], [ByHeader] and [ByFunc]
// make.
type Dimension interface {
	dimension() rule.Dim
}

// Builtin is the type of the Dimensions that take no argument: [Method],
// [IP], [User], [UserOrIP] and [Shared].
type Builtin int

const (
	// Method counts every request to the route in one bucket: the whole
	// route, as Per() does. It is the default.
	Method Builtin = iota
	// IP counts per client IP address, found by the rule's [IPIdentity]; an
	// IPv6 client counts per /64 by default.
	IP
	// User counts per authenticated user id, found by the rule's
	// [UserIdentity], which a User rule needs. A request without a valid
	// identity is answered 401 and counted nowhere.
	User
	// UserOrIP counts as User does, and a request without a valid identity
	// per client IP, in buckets of its own ("anon:<ip>"), instead of
	// answering it 401: one shared anonymous bucket never exists.
	UserOrIP
	// Shared counts every route that carries the rule in one count,
	// instead of one per route: the routes of a group given one
	// annotation with Use, or any routes whose rules have the same [Key]
	// and [Name], on every instance. Combined with other dimensions it
	// shares per their values: Per(Shared, User) is one budget per user
	// across the group. The routes of a group must agree on the rule's
	// algorithm, window and limit (New and RateLimit refuse a route that
	// does not, within one Limiter), and on a route with [Rule]s every
	// rule of a kind (rate or [InFlight]) is Shared or none is. See
	// docs/features.md, Shared budgets.
	Shared
)

func (b Builtin) dimension() rule.Dim { return rule.Builtin(int(b)) }

// ByParam counts per value of the route's path parameter name, such as
// ByParam("id") on "/api/vouchers/:id/claim": one count per voucher. A
// route without that parameter is a wiring mistake: its requests are
// answered 500 and the log says which rule and parameter.
//
// The value is whatever the client writes in the path, and each distinct
// value gets a Redis key of its own that lives for the rule's window, so
// a client that sends made-up values makes a key per value. Bound the
// values before the limit runs: put a handler ahead of it on the route
// that aborts, with 404 for example, when the value names nothing the
// application has (an id not in its database), so that only real values
// are ever counted. See the package documentation, Values the client
// chooses.
func ByParam(name string) Dimension {
	return valueDim(rule.Param(name))
}

// ByHeader counts per value of the request header name, such as
// ByHeader("X-API-Key"). A request without the header (or with an empty
// one) is answered 400 {"code":400,"message":"Missing X-API-Key header"}
// and counted nowhere: it is never put in a shared bucket. The value is
// counted as sent, so consider [HashIdentities] for secrets such as API
// keys.
//
// Any client can send any value, and each distinct value gets a Redis key
// of its own that lives for the rule's window, so a client that sends
// made-up values makes a key per value. Bound the values before the limit
// runs: put a handler ahead of it on the route that aborts, with 401 for
// example, when the value is not one the application issued (an API key
// not in its store), so that only real values are ever counted. See the
// package documentation, Values the client chooses.
func ByHeader(name string) Dimension {
	return valueDim(rule.Header(name))
}

// ByFunc counts per the value f returns for the request, under name (which
// keys and [Target.Values] use). When f returns false or an empty value,
// the request is answered 400 {"code":400,"message":"Bad request"} and
// counted nowhere. f runs on every request of the route, so it must be
// fast and safe for concurrent use. When the value comes from the client,
// f is where to bound it: returning false for a value the application
// does not know keeps it from getting a key of its own (see [ByParam]).
func ByFunc(name string, f func(c *gin.Context) (value string, ok bool)) Dimension {
	return valueDim(rule.Func(name, f))
}

// Per sets what the rule counts per: each combination of the dimensions'
// values gets its own count, such as Per(ginlimit.User,
// ginlimit.ByParam("id")) for "one claim per user per voucher". Per() and
// Per(Method) count the whole route. At most 4
// dimensions, none twice, no two of one name (the name keys
// [Target.Values]), and Method only alone. [Shared] adds no part to the
// key: it makes the count the group's instead of the route's. Text from the request is
// escaped and bounded in keys as user ids are (see docs/design.md, Keys).
// That bounds each key's length, not how many keys there are: see
// [ByParam] and [ByHeader] for values the client chooses.
func Per(dims ...Dimension) RuleOption {
	dims = slices.Clone(dims)
	return ruleOption(func(r *rule.Config) error { return setDims(r, "Per", dims) })
}

// valueDim is a Dimension made by ByParam, ByHeader or ByFunc.
type valueDim rule.Dim

func (d valueDim) dimension() rule.Dim { return rule.Dim(d) }

// setDims sets r's dimensions for the option what.
func setDims(r *rule.Config, what string, dims []Dimension) error {
	ds := make([]rule.Dim, len(dims))
	for i, x := range dims {
		if x == nil {
			return fmt.Errorf("%s: dimension %d is nil: give Method, IP, User, UserOrIP, Shared, or one of ByParam, ByHeader or ByFunc", what, i+1)
		}
		ds[i] = x.dimension()
	}
	return rule.SetDims(&r.Common, what, ds)
}

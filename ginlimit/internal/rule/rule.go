package rule

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
)

// Config is what a route's rule options set for one rule, whatever its
// kind: Compile sorts it into the settings of the kind it makes (a rate
// rule, or an in-flight rule when InFlight.N is above 0), and refuses,
// naming the option, a setting the kind has no use for.
type Config struct {
	Common
	Rate     RateSettings
	InFlight InFlightConfig
}

// Common is what every kind of rule has: its key prefix, name and 429
// message, and what it counts per and how the identity is found.
type Common struct {
	Prefix   string
	Name     string
	Message  string
	Dims     []Dim // nil: the whole route
	IPs      *identity.IP
	Users    identity.User
	HashKey  []byte
	AnonByIP bool
	Shared   bool // Shared: one count for every route of the group
}

// RateSettings is what only a rate rule has.
type RateSettings struct {
	Window     time.Duration
	Limit      int
	Alg        Algorithm
	SubWindows int
	Burst      int
	Cost       int // 1: a request's cost is CostFunc's
	CostFunc   func(*gin.Context) int
	PlanPick   func(*gin.Context) string // LimitBy's
	Plans      map[string]int            // LimitBy's limits
	Ban        *BanConfig                // Ban's settings, or nil
}

// RateConfig is a rate rule's settings, which an override changes.
type RateConfig struct {
	Common
	RateSettings
}

// InFlightConfig is what only an in-flight rule has: InFlight's n and
// lease.
type InFlightConfig struct {
	N     int
	Lease time.Duration
}

// BanConfig is what Ban configures.
type BanConfig struct {
	After    int
	Within   time.Duration
	Duration time.Duration
	Message  string
}

// Route is what a rule takes from its route: its deny cache's size and
// staleness bound, and whether FailLocal's fallback (dividing by
// Instances) decides for it.
type Route struct {
	DenySize  int
	Staleness time.Duration
	Local     bool
	Instances *state.Instances
}

// Base is what every kind of rule has: its name, how its keys are built
// (prefix, dimensions, identity), and what its answers say (the headers'
// texts, the 429 body). A decision points at the Base of the rule that
// decided it.
type Base struct {
	Name        string
	EscapedName string // as it appears in keys
	Prefix      string
	Limit       int           // its decisions' Limit: a rate rule's limit, its Ban's too, or an in-flight rule's n
	Window      time.Duration // its decisions' Window: a rate rule's; 0 for an in-flight rule
	Source      uint8         // its decisions' Source: 0 for its options, or the kind of override it is
	Dims        []Dim         // what it counts per; none for the whole route
	IPs         *identity.IP
	Users       identity.User
	HashKey     []byte
	AnonByIP    bool
	Shared      bool   // Shared: its keys' scope is SharedRoute's
	Group       string // Shared: its group and the settings the group's
	GroupTerms  string // routes must agree on (groupOf)

	Message      string // its 429's message
	QuotedName   string
	LimitText    string
	PolicyHeader string // this rule's RateLimit-Policy item
	Body429      []byte
}

// Core returns r: a rule of any kind has one (Any).
func (r *Base) Core() *Base { return r }

// Any is a rule a route declares: a *Rate or an *InFlight.
type Any interface{ Core() *Base }

// Rate is one count in a window: limit units per window under an
// algorithm, decided with the route's other rate rules in one script call.
type Rate struct {
	Base
	Alg      Algorithm
	MaxCost  int // the most one request can ever be admitted with
	Cost     int // 1, the cost of a request without a Cost function: that of Args
	CostFunc func(*gin.Context) int
	Pick     func(*gin.Context) string // the request's plan
	Plans    map[string]*Rate          // by plan name; nil without LimitBy
	Parent   *Rate                     // a plan's rule: the rule it is a plan of; nil for another
	Ban      *Ban                      // its Ban, or nil
	Deny     *state.DenyCache          // nil when off
	Local    *state.Buckets            // the FailLocal fallback, or nil

	Cfg      RateConfig    // the settings it was compiled from, which an override changes
	Script   *redis.Script // the single-rule script, with this rule's settings written in; nil for an override
	Args     []any         // that script's arguments at the fixed cost: the clock (""), the cost
	Settings []any         // this rule's arguments of the several-rule script, but the cost (Args)
}

// Ban is a rate rule's Ban: a count of the refusals of its rule's
// identities on a key of its own, decided in the same script call just
// before its rule (lua/penalty.lua). It refuses while the identity is
// banned and counts strikes when a request is refused. It lives only in
// its rule (Rate.Ban), and its Base is its rule's but for the key prefix
// and the 429 body, so that a ban reads as its rule's refusal with Banned
// set and the ban's message.
type Ban struct {
	Base
	Settings []any            // its arguments of the several-rule script, but the cost (Args)
	Deny     *state.DenyCache // nil when off
	Local    *state.Buckets   // the FailLocal fallback's memory of the bans Redis reported, or nil
}

// InFlight is an in-flight rule: at most Limit (its n) requests being
// served at once per key, each holding a slot leased for Lease.
type InFlight struct {
	Base
	Lease time.Duration
	Local *state.Slots // the FailLocal fallback's count of slots, or nil
}

// Records is how many records a call on r takes in a script call: its
// own, and its Ban's.
func (r *Rate) Records() int {
	if r.Ban != nil {
		return 2
	}
	return 1
}

// Compile compiles one rule of a route, of the kind its options make it.
// named says whether the route declares its rules with Rule, whose 429
// bodies name the rule.
func Compile(c Config, route Route, named bool) (Any, error) {
	if slices.ContainsFunc(c.Dims, func(d Dim) bool { return d.Kind == KindUser }) && c.Users == nil {
		return nil, errors.New("Per(User), Per(UserOrIP) or a User dimension needs ginlimit.UserIdentity(...), for example identity.NewJWT(identity.HMACSecret(secret))")
	}
	if c.IPs == nil {
		c.IPs = &identity.IP{}
	}
	// Each kind's constructor returns its own pointer type: turned into an
	// Any only when it is not nil.
	if c.InFlight.N > 0 {
		r, err := compileInFlight(c, route, named)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	r, err := CompileRate(RateConfig{c.Common, c.Rate}, route, named, false)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// CompileRate compiles a rate rule, its Ban and its plans. An override's
// rule (override) goes through the several-rule script, whose settings
// are arguments: no value an operator sets loads a script in Redis.
func CompileRate(c RateConfig, route Route, named, override bool) (*Rate, error) {
	if err := c.Alg.Check(&c); err != nil {
		return nil, err
	}
	base, err := c.base(c.Prefix+c.Alg.Tag(&c), c.Limit, named)
	if err != nil {
		return nil, err
	}
	param := c.Alg.Param(&c)
	base.Window = c.Window
	r := &Rate{
		Base:     base,
		Alg:      c.Alg,
		MaxCost:  c.Alg.MaxCost(&c),
		Cost:     c.Cost,
		CostFunc: c.CostFunc,
		Deny:     route.DenyCache(c.Ban != nil),
		Cfg:      c,
		Args:     SingleArgs("", c.Cost),
		Settings: Args(c.Alg.Name(), c.Window, c.Limit, param),
	}
	if route.Local {
		r.Local = state.NewBuckets(c.Limit, route.Instances, c.Window, LocalKeys)
	}
	if !override {
		r.Script = redis.NewScript(lua.Single(c.Alg.Name(), c.Window.Microseconds(), int64(c.Limit), int64(param)))
	}
	r.PolicyHeader = r.QuotedName + ";q=" + r.LimitText + ";w=" + strconv.FormatInt(CeilSeconds(c.Window), 10)
	if c.Shared {
		r.Group, r.GroupTerms = c.groupOf("rate", c.rateTerms())
	}
	if c.Ban != nil {
		if err := r.compileBan(*c.Ban, route, named); err != nil {
			return nil, err
		}
	}
	if c.Plans != nil {
		if err := r.compilePlans(c, route, named, override); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// compileInFlight compiles an in-flight rule, refusing the rate rules'
// settings that it has no use for.
func compileInFlight(c Config, route Route, named bool) (*InFlight, error) {
	n, lease := c.InFlight.N, c.InFlight.Lease
	switch {
	case c.Rate.Cost != 1 || c.Rate.CostFunc != nil:
		return nil, fmt.Errorf("InFlight(%d, %v): an in-flight rule holds one slot per request: give Cost to the rate rules' own Rule", n, lease)
	case c.Rate.Plans != nil:
		return nil, fmt.Errorf("InFlight(%d, %v): an in-flight rule has no limits per request: give LimitBy to the rate rules' own Rule", n, lease)
	case c.Rate.Ban != nil:
		return nil, fmt.Errorf("InFlight(%d, %v): an in-flight rule does not ban: give Ban to a rate rule of the route", n, lease)
	}
	base, err := c.base(c.Prefix+SlotTag, n, named)
	if err != nil {
		return nil, err
	}
	r := &InFlight{Base: base, Lease: lease}
	// No window: the IETF draft's w is optional, and a count of requests
	// in flight has none. Its unit is the draft's concurrent-requests.
	r.PolicyHeader = r.QuotedName + ";q=" + r.LimitText + `;qu="concurrent-requests"`
	if c.Shared {
		r.Group, r.GroupTerms = c.groupOf("in-flight", fmt.Sprintf(", InFlight(%d, %v)", n, lease))
	}
	if route.Local { // the fallback decides only for FailLocal
		r.Local = state.NewSlots(n, route.Instances)
	}
	return r, nil
}

// compileBan compiles r's Ban from b: r's name, dimensions and identity
// under its own key prefix ("<prefix>ban:"), and the ban's settings as the
// script's window, limit and param.
func (r *Rate) compileBan(b BanConfig, route Route, named bool) error {
	body, err := Body429(b.Message, r.Name, named)
	if err != nil {
		return fmt.Errorf("Ban: %w", err)
	}
	br := &Ban{
		Base:     r.Base,
		Settings: Args(penalty, b.Within, b.After, int(b.Duration.Milliseconds())),
		Deny:     route.DenyCache(false),
	}
	br.Prefix, br.Body429, br.Message = r.Prefix+banTag, body, b.Message
	if route.Local {
		// A ban is Redis's: the fallback starts none, but keeps the one
		// Redis last reported.
		br.Local = state.NewBans(LocalKeys)
	}
	r.Ban = br
	return nil
}

// compilePlans compiles one rule per plan beside r, the default plan's. A
// plan's rule keeps r's name; its key prefix carries the plan, so two plans
// never share counts.
func (r *Rate) compilePlans(c RateConfig, route Route, named, override bool) error {
	r.Pick, r.Plans = c.PlanPick, map[string]*Rate{}
	for name, limit := range c.Plans {
		pc := c
		pc.PlanPick, pc.Plans, pc.Limit, pc.Name = nil, nil, limit, r.Name
		pc.Prefix = c.Prefix + planTag(name)
		pr, err := CompileRate(pc, route, named, override)
		if err != nil {
			return fmt.Errorf("plan %q: %w", name, err)
		}
		pr.Parent = r
		r.Plans[name] = pr
	}
	return nil
}

// base is the part of a rule of these settings that every kind has, its
// keys under prefix and its decisions' Limit limit. Its PolicyHeader is
// the kind's to write.
func (c *Common) base(prefix string, limit int, named bool) (Base, error) {
	name := c.RuleName()
	body429, err := Body429(c.Message, name, named)
	if err != nil {
		return Base{}, err
	}
	return Base{
		Name:        name,
		EscapedName: Escape(name, IDSafe),
		Prefix:      prefix,
		Limit:       limit,
		Dims:        c.Dims,
		IPs:         c.IPs,
		Users:       c.Users,
		HashKey:     c.HashKey,
		AnonByIP:    c.AnonByIP,
		Shared:      c.Shared,
		Message:     c.Message,
		QuotedName:  SFString(name),
		LimitText:   strconv.Itoa(limit),
		Body429:     body429,
	}, nil
}

// RuleName is the rule's name: its Name, or one derived from its key
// prefix.
func (c *Common) RuleName() string {
	if c.Name == "" {
		return DefaultName(c.Prefix)
	}
	return c.Name
}

// Body429 is the 429 body of rule name, saying message; named says
// whether it names the rule.
func Body429(message, name string, named bool) ([]byte, error) {
	body := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Rule    string `json:"rule,omitempty"`
	}{Code: 429, Message: message}
	if named {
		body.Rule = name
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("Message(%q): %w", message, err)
	}
	return b, nil
}

// SFString quotes s as an RFC 8941 structured-field string.
func SFString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// CeilSeconds rounds d up to whole seconds.
func CeilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// groupOf is, for a Shared rule of these settings, of kind "rate" or
// "in-flight", the group it counts in (its kind, Key and Name) and the
// settings every route of the group must give it, the kind's own being
// terms; "" for another rule. Within one Limiter the routes of a group
// must agree on them, so that a typo never splits a group silently.
func (c *Common) groupOf(kind, terms string) (group, all string) {
	if !c.Shared {
		return "", ""
	}
	var b strings.Builder
	b.WriteString("Per(Shared")
	for _, d := range c.Dims {
		b.WriteString(", " + d.Describe())
	}
	b.WriteString(")")
	b.WriteString(terms)
	if c.HashKey != nil {
		b.WriteString(", HashIdentities")
	}
	return kind + " " + strconv.Quote(c.Prefix) + " " + strconv.Quote(c.RuleName()), b.String()
}

// rateTerms is what a Shared rate rule's routes must agree on beside its
// dimensions (see groupOf).
func (c *RateConfig) rateTerms() string {
	var b strings.Builder
	fmt.Fprintf(&b, ", %s, Window(%v), Limit(%d)", c.Alg.Name(), c.Window, c.Limit)
	b.WriteString(c.Alg.Terms(c))
	if c.Ban != nil {
		fmt.Fprintf(&b, ", Ban(%d, %v, %v)", c.Ban.After, c.Ban.Within, c.Ban.Duration)
	}
	if c.Plans != nil {
		plans := slices.Sorted(maps.Keys(c.Plans))
		for i, name := range plans {
			plans[i] = strconv.Quote(name) + ": " + strconv.Itoa(c.Plans[name])
		}
		b.WriteString(", LimitBy(" + strings.Join(plans, ", ") + ")")
	}
	return b.String()
}

// LocalKeys is how many keys the in-process fallback of FailLocal
// remembers per rule.
const LocalKeys = 10_000

// ExactBelow is the remaining quota below which the deny cache keeps a
// key's bound and counts its calls in flight: near the limit, where a
// bound saves calls; far from it, a key is left to Redis alone.
const ExactBelow = 64

// DenyCache returns the deny cache of a rule on the route, or nil when the
// route has it off; strikes says the rule has a Ban, whose strikes the
// cache counts.
func (route Route) DenyCache(strikes bool) *state.DenyCache {
	return state.NewDenyCache(state.DenyConfig{Size: route.DenySize, Staleness: route.Staleness, ExactBelow: ExactBelow, Strikes: strikes})
}

package ginlimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
)

// Policy is one compiled rate limit rule: a backend, a window, a limit and
// what to do when Redis fails. Make one with [Limiter.Policy] to take
// decisions without gin; the [RateLimit] annotation compiles one per route.
//
// A Policy is immutable and safe for concurrent use.
type Policy struct {
	client    redis.Scripter
	prefix    string
	window    time.Duration
	limit     int
	name      string
	typ       LimitType
	ips       *identity.IP
	users     identity.User
	onFail    FailPolicy
	timeout   time.Duration
	logger    *slog.Logger
	logs      *logThrottle
	debugLogs logThrottle // rejections at debug level, per rule
	honours   bool        // the client bounds reads by the context deadline
	pipe      *redis.AutoPipeliner
	calls     atomic.Int64 // decisions now waiting on Redis
	pipeAbove int64        // pipelineAbove; tests lower it
	deny      *denyCache

	alg       AlgorithmKind
	script    *redis.Script
	param     int                    // the script's ARGV[3]
	maxCost   int                    // the most one request can ever be admitted with
	cost      int                    // the fixed cost, when costFunc is nil
	costFunc  func(*gin.Context) int // per-request cost, or nil
	clock     func() int64           // tests only: the script's clock in µs
	rules     []*Policy              // the rules of a several-rule route, or nil
	brk       *breakers              // nil when off
	local     *localLimiter          // the FailLocal fallback, or nil
	observers []Observer
	headers   HeaderStyle
	skip      func(*gin.Context) bool
	onLimited func(*gin.Context, Decision)
	onError   func(*gin.Context, error)
	respond   func(*gin.Context, Decision)
	hashKey   []byte
	anonByIP  bool
	tierClaim string
	tiers     map[string]*Policy // by claim value; nil without Tiers
	shadow    bool

	args         []any  // script ARGV for the fixed cost: window µs, limit, param, cost
	policyHeader string // RateLimit-Policy value
	quotedName   string
	limitText    string
	body429      []byte
}

// compile checks the options that depend on each other and precomputes what
// every request would otherwise recompute.
func compile(s settings, logs *logThrottle) (*Policy, error) {
	if len(s.errs) > 0 {
		return nil, errors.Join(s.errs...)
	}
	if len(s.rules) > 0 {
		return compileMulti(s, logs)
	}
	if s.client == nil {
		return nil, errors.New("ginlimit: no Redis backend: give ginlimit.Redis(client) to ginlimit.New or to the route")
	}
	if s.typ == User && s.users == nil {
		return nil, errors.New("ginlimit: Type(User) needs ginlimit.UserIdentity(...), for example identity.NewJWT(identity.HMACSecret(secret))")
	}
	if s.ips == nil {
		s.ips = &identity.IP{}
	}
	if s.alg == SlidingCounter && s.window.Microseconds()%int64(s.subWindows) != 0 {
		return nil, fmt.Errorf("ginlimit: SubWindows(%d): does not divide Window(%v) in whole microseconds", s.subWindows, s.window)
	}
	script, param := s.alg.script(&s)
	maxCost := s.limit
	if s.alg == TokenBucket {
		maxCost = s.burstOrLimit()
	}
	if s.costFunc == nil && s.cost > maxCost {
		return nil, fmt.Errorf("ginlimit: Cost(%d): more than the rule can ever admit (%d)", s.cost, maxCost)
	}
	name := s.name
	if name == "" {
		name = defaultName(s.prefix)
	}
	body, err := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{429, s.message})
	if err != nil {
		return nil, fmt.Errorf("ginlimit: Message(%q): %w", s.message, err)
	}
	p := &Policy{
		client:     s.client,
		prefix:     s.prefix,
		window:     s.window,
		limit:      s.limit,
		name:       name,
		typ:        s.typ,
		ips:        s.ips,
		users:      s.users,
		onFail:     s.onFail,
		timeout:    s.timeout,
		logger:     s.logger,
		logs:       logs,
		honours:    honoursContext(s.client),
		deny:       newDenyCache(s.deny),
		brk:        newBreakers(s.client, s.breakFailures, s.breakOpen),
		shadow:     s.shadow,
		observers:  s.observers,
		headers:    s.headers,
		skip:       s.skip,
		onLimited:  s.onLimited,
		onError:    s.onError,
		respond:    s.respond,
		hashKey:    s.hashKey,
		anonByIP:   s.anonByIP,
		pipeAbove:  pipelineAbove,
		alg:        s.alg,
		script:     script,
		param:      param,
		maxCost:    maxCost,
		cost:       s.cost,
		costFunc:   s.costFunc,
		args:       []any{s.window.Microseconds(), s.limit, param, s.cost},
		quotedName: sfString(name),
		limitText:  strconv.Itoa(s.limit),
		body429:    body,
	}
	if s.autoPipeline {
		// Only a plain client: go-redis's cluster auto-pipeliner shares
		// batches across masters, so one dead master would stall the
		// others, and Ring does not auto-pipeline at all.
		if ap, ok := s.client.(*redis.Client); ok {
			if p.pipe, err = ap.AsyncAutoPipelineWithOptions(pipelineOptions()); err != nil {
				return nil, fmt.Errorf("ginlimit: AutoPipeline(true): %w", err)
			}
		}
	}
	// Load the script now, best effort, so that the first burst of
	// decisions does not meet NOSCRIPT and send each script twice. Run
	// handles NOSCRIPT anyway, so a failure here costs nothing, and a dead
	// Redis delays start-up by DefaultTimeout at most.
	ctx, cancel := context.WithTimeout(context.Background(), min(p.timeout, DefaultTimeout))
	_, _ = bounded(ctx, func() (string, error) { return p.script.Load(ctx, p.client).Result() })
	cancel()
	if s.onFail == FailLocal {
		p.local = newLocalLimiter(s.limit, s.localInstances, s.window)
	}
	if s.tierLimits != nil {
		if err := compileTiers(p, s, logs); err != nil {
			return nil, err
		}
	}
	p.policyHeader = p.quotedName + ";q=" + p.limitText + ";w=" + strconv.FormatInt(ceilSeconds(s.window), 10)
	return p, nil
}

// Name returns the rule's name, as in the RateLimit-Policy header.
func (p *Policy) Name() string { return p.name }

// Allow decides one request for key, an identity of the caller's choosing
// (a user id, "ip:192.0.2.1", a tenant). The Redis key is the policy's prefix
// followed by key, escaped, inside a Redis Cluster hash tag.
//
// Allow makes one Redis round trip, bounded by ctx and the policy's timeout.
// When Redis fails it returns the error, wrapped, together with the decision
// the policy's FailPolicy takes.
func (p *Policy) Allow(ctx context.Context, key string) (Decision, error) {
	return p.AllowN(ctx, key, p.cost)
}

// AllowN is [Policy.Allow] for a request that costs n units. A request that
// costs more than the rule can ever admit is rejected without a Redis call,
// with [Decision.Reason] saying why.
func (p *Policy) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	if len(p.observers) > 0 {
		start := time.Now()
		defer func() { p.observe(ctx, "", &d, time.Since(start)) }()
	}
	var b strings.Builder
	b.Grow(len(p.prefix) + escapedLen(key, routeSafe) + 2)
	b.WriteString(p.prefix)
	b.WriteByte('{')
	writeEscaped(&b, key, routeSafe)
	b.WriteByte('}')
	if p.rules != nil {
		dims := make([]string, len(p.rules))
		costs := make([]int, len(p.rules))
		for i := range costs {
			costs[i] = n
		}
		return p.decideMulti(ctx, p.multiKeys(b.String()[len(p.prefix):], dims), costs)
	}
	return p.decide(ctx, []string{b.String()}, n)
}

// decide answers from the deny cache when it can, and otherwise runs the
// sliding-log script on the full Redis key keys[0]. keys is passed in, not
// built here, so the middleware can keep it in its per-request scratch.
func (p *Policy) decide(ctx context.Context, keys []string, cost int) (Decision, error) {
	key := keys[0]
	cost = max(cost, 1)
	if cost > p.maxCost {
		return Decision{
			Rule: p.name, Limit: p.limit,
			Reason: "the request costs " + strconv.Itoa(cost) + ", more than the rule can ever admit (" + strconv.Itoa(p.maxCost) + ")",
		}, nil
	}
	args := p.args
	if cost != p.cost || p.clock != nil {
		args = []any{p.args[0], p.args[1], p.args[2], cost}
		if p.clock != nil {
			args = append(args, p.clock())
		}
	}
	var sent int64
	var counted *keyState
	v, snap := callRedis, keyState{}
	if p.deny != nil {
		sent = p.deny.now()
		if v, counted, snap = p.deny.enter(key, sent, cost); v == rejected {
			return p.cached(snap, sent), nil // no context, no timer: the cheap path
		}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	for v == waitTurn {
		if err := wait(ctx, snap.wake); err != nil {
			return p.failed(key, cost, err)
		}
		sent = p.deny.now()
		if v, counted, snap = p.deny.enter(key, sent, cost); v == rejected {
			return p.cached(snap, sent), nil
		}
	}
	probe := false
	var brk *breaker
	if p.brk != nil {
		brk = p.brk.forKey(ctx, key)
		var ok bool
		if ok, probe = brk.allow(); !ok {
			if p.deny != nil {
				p.deny.leave(key, counted, cost, sent, nil, false)
			}
			d, err := p.failed(key, cost, ErrCircuitOpen)
			d.breaker = brk.state()
			return d, err
		}
	}
	var reply []any
	var err error
	if p.pipe != nil && p.calls.Add(1) > p.pipeAbove {
		reply, err = runPipelined(ctx, p.pipe, p.script, p.client, key, args)
		p.calls.Add(-1)
	} else {
		if p.pipe != nil {
			defer p.calls.Add(-1)
		}
		reply, err = runScript(ctx, p.honours, p.script, p.client, keys, args)
	}
	var d Decision
	if err == nil {
		d, err = p.parse(reply)
	}
	var state string
	if brk != nil {
		brk.done(probe, err != nil && parent.Err() == nil && unavailable(err))
		if len(p.observers) > 0 {
			state = brk.state()
		}
	}
	if p.deny != nil {
		p.deny.leave(key, counted, cost, sent, &d, err == nil)
	}
	if err != nil {
		d, err = p.failed(key, cost, err)
	}
	d.breaker = state
	return d, err
}

// failed is the decision and error when Redis could not decide on key at
// the given cost.
func (p *Policy) failed(key string, cost int, err error) (Decision, error) {
	err = fmt.Errorf("ginlimit: %v %q: %w", p.alg, key, err)
	if p.local != nil {
		d := p.decideLocal([]string{key}, []int{cost}, []*Policy{p})
		d.Err = err
		return d, err
	}
	return Decision{Rule: p.name, Allowed: p.onFail == FailOpen, Limit: p.limit, Err: err}, err
}

// cached is the decision for a rejection the deny cache is certain of at now.
func (p *Policy) cached(st keyState, now int64) Decision {
	reset := time.Duration(st.until - now)
	return Decision{
		Rule:       p.name,
		Limit:      p.limit,
		Remaining:  st.remaining,
		Reset:      reset,
		RetryAfter: reset,
		Time:       time.UnixMicro(st.resetAt).Add(-reset),
		Cached:     true,
	}
}

// parse checks and converts the script's reply {allowed, remaining,
// reset_us, now_us, retry_us}.
func (p *Policy) parse(reply []any) (Decision, error) {
	if len(reply) != 5 {
		return Decision{}, fmt.Errorf("unexpected reply of %d elements", len(reply))
	}
	var n [5]int64
	for i, v := range reply {
		x, ok := v.(int64)
		if !ok {
			return Decision{}, fmt.Errorf("unexpected reply element %d of type %T", i, v)
		}
		n[i] = x
	}
	d := Decision{
		Rule:    p.name,
		Allowed: n[0] == 1,
		Limit:   p.limit,
		// A key can hold more than the limit (a limit lowered on redeploy,
		// two rules sharing a key): remaining is never reported below 0.
		Remaining: int(max(n[1], 0)),
		Reset:     time.Duration(n[2]) * time.Microsecond,
		Time:      time.UnixMicro(n[3]),
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(n[4]) * time.Microsecond
	}
	return d, nil
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

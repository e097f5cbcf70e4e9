package ginlimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// FailPolicy says what a route does when Redis cannot decide (an error or a
// timeout).
//
// A process that cannot get a decision to a healthy Redis in time
// ([ErrSaturated]) is not a Redis failure: it never opens the breaker, no
// policy applies, and the request is refused with 503 (only Redis grants
// while Redis is healthy).
type FailPolicy string

const (
	// FailLocal, the default, decides with an in-process limiter of the same
	// rules while Redis is failing: a token bucket per key refilling its
	// share, limit/n per window, where n is how many instances share the
	// Redis ([InstancesKey], or [LocalInstances]). The share is never rounded
	// up, so a share below one request admits nothing. It continues from what
	// Redis last said, never from a full budget: from this instance's part of
	// the remaining Redis last reported for the key, refilling only from the
	// reset it reported; a ban Redis reported holds. Its decisions have Local
	// set; it keeps about DefaultLocalKeys keys per rule. An instance that has
	// never heard from Redis spends nothing: its FailLocal routes answer as
	// FailClosed does until Redis answers it once. docs/operations.md ("The
	// failure policies") gives the bounds it keeps.
	FailLocal FailPolicy = "FailLocal"
	// FailOpen allows the request and logs the error: a rate limiter outage
	// lets every request through, which an attacker who can slow Redis
	// down can use. Choose it only where the limit protects nothing.
	FailOpen FailPolicy = "FailOpen"
	// FailClosed answers 503 with a JSON body: a rate limiter outage becomes
	// a service outage.
	FailClosed FailPolicy = "FailClosed"
)

// OnFailure sets what happens when Redis cannot decide. The default is
// [FailLocal].
func OnFailure(p FailPolicy) Option {
	return routeOption(func(r *routeConfig) error {
		if p != FailLocal && p != FailOpen && p != FailClosed {
			return fmt.Errorf("OnFailure(%q): want FailLocal, FailOpen or FailClosed", string(p))
		}
		r.onFail = p
		return nil
	})
}

// DefaultLocalKeys is how many keys the in-process fallback of [FailLocal]
// remembers per rule.
const DefaultLocalKeys = rule.LocalKeys

// LocalInstances tells the [FailLocal] fallback how many application
// instances share the route's rules: while Redis is down, each instance
// admits limit/n per window on its own, so together they stay near the
// limit (nothing, when limit < n: see [FailLocal]). It must be
// from 1 to 1e6. Given on a Limiter made by [New], it applies once the
// heartbeat has answered (see [FailLocal]). Without it, n is the count of the
// instances that announce themselves in [InstancesKey] (see
// [HeartbeatPeriod]), 1 until a heartbeat has answered; given, on a route
// or on the limiter, it overrides that count (the route's wins).
func LocalInstances(n int) Option {
	return routeOption(func(r *routeConfig) error {
		if n < 1 || n > 1e6 {
			return fmt.Errorf("LocalInstances(%d): want 1 to 1e6", n)
		}
		r.localInstances = n
		return nil
	})
}

// failed is the decision, and the error, when Redis could not decide the
// calls of a request: the in-process fallback's under FailLocal, and
// otherwise the failure policy's. A saturated process (ErrSaturated) is not
// a Redis failure, and only Redis grants while Redis is healthy: it is
// refused under every policy (see [ErrSaturated]). The error names the
// rule and the scope's route, never the key, which holds the identity.
func (p *Policy) failed(req *request, err error) (Decision, error) {
	first := req.calls[0].rule
	saturated := errors.Is(err, ErrSaturated)
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	if p.onFail == FailLocal && !saturated && p.route.instances.Heard() {
		d := p.decideLocal(req)
		d.Err = err
		return d, err
	}
	return Decision{Rule: first.Name, Allowed: p.onFail == FailOpen && !saturated, Limit: first.Limit, Window: first.Window, Source: Source(first.Source), Err: err, decider: &first.Base}, err
}

// describe names what a request was limited by, for error texts: the route
// and the rules, never the identity.
func (p *Policy) describe(req *request) string {
	where := req.scope.Label()
	if len(p.all) == 1 {
		switch r := p.all[0].(type) {
		case *rule.InFlight:
			return fmt.Sprintf("%s: rule %q (in-flight)", where, r.Name)
		case *rule.Rate:
			return fmt.Sprintf("%s: rule %q (%v)", where, r.Name, r.Alg)
		}
	}
	var names []string
	if req.inFlight() {
		for _, r := range p.slots {
			names = append(names, r.Name)
		}
	}
	for _, c := range req.calls {
		names = append(names, c.rule.Name)
	}
	return fmt.Sprintf("%s: rules %q", where, names)
}

// decideLocal takes each call's cost from its rule's in-process bucket for
// its key, all or none, and returns the decision of the first rule that
// refused, or of the last rule. A ban Redis reported still refuses.
func (p *Policy) decideLocal(req *request) Decision {
	now := time.Now()
	if p.localClock != nil {
		now = p.localClock()
	}
	var d Decision
	for i := range req.calls {
		c := &req.calls[i]
		if b := c.rule.Ban; b != nil && b.Local != nil {
			// The ban is Redis's: the fallback starts none, but keeps the
			// one Redis last reported, whose decision is its rule's.
			if left := b.Local.Banned(c.ban.key, now); left > 0 {
				p.giveBack(req.calls[:i])
				return Decision{Rule: b.Name, Limit: b.Limit, RetryAfter: left, Reset: left, Time: now,
					Local: true, Banned: true, decider: &b.Base}
			}
		}
		local := c.rule.Local
		if local == nil {
			continue
		}
		left, retry, ok := local.Take(c.key, now, c.cost)
		d = Decision{Rule: c.rule.Name, Allowed: ok, Limit: c.rule.Limit, Window: c.rule.Window, Source: Source(c.rule.Source), Remaining: left, Time: now, Local: true, decider: &c.rule.Base}
		if !ok {
			d.RetryAfter, d.Reset = retry, retry
			p.giveBack(req.calls[:i])
			return d
		}
		d.Reset = local.UnitRefill()
	}
	return d
}

// giveBack returns the costs that decideLocal took for calls, which a later
// rule refused.
func (p *Policy) giveBack(calls []call) {
	for _, c := range calls {
		if c.rule.Local != nil {
			c.rule.Local.Give(c.key, c.cost)
		}
	}
}

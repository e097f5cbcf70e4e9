package decide

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// The probes let ginlimit's tests, which build routes from options and so
// cannot live in this package, look inside one request: the keys it
// counts on and what a debug line says of its identity. No request path
// calls them.

// ProbeKeys prepares a request of p's rate rules on c (of its in-flight
// rules when slots), as Serve does, and returns its keys by record (a
// Ban's before its rule's) and the rule whose key each is; ok is false
// when c was answered instead (401, 400 or 500).
func ProbeKeys(p *Route, c *gin.Context, slots bool) (keys []string, deciders []*rule.Base, ok bool) {
	if slots {
		req := p.newSlotRequest(requestScope(c))
		if ok = probed(p, c, req, req.prepareSlots); ok {
			for _, r := range p.Slots {
				deciders = append(deciders, &r.Base)
			}
		}
		return req.keys, deciders, ok
	}
	req := p.newRequest(requestScope(c))
	if ok = probed(p, c, req, req.prepare); ok {
		for _, cl := range req.calls {
			if cl.ban != nil {
				deciders = append(deciders, &cl.rule.Ban.Base)
			}
			deciders = append(deciders, &cl.rule.Base)
		}
	}
	return req.keys, deciders, ok
}

// probed runs prepare, req's prepare or prepareSlots, on c, and answers c
// as Serve does when it fails; it reports whether prepare succeeded.
func probed(p *Route, c *gin.Context, req *request, prepare func(*gin.Context) (*rule.Base, error)) bool {
	failed, err := prepare(c)
	if err != nil {
		answers{p}.identityFailed(c, req.scope, failed, err)
	}
	return err == nil
}

// ProbeDebug writes the debug line of a refusal of c's request by r, as
// a refusal writes it, however recently the route wrote one.
func ProbeDebug(p *Route, c *gin.Context, r *rule.Base, msg string) {
	ProbeQuiet(p)
	answers{p}.debug(c, &request{d: Decision{Rule: r.Name, decider: r}}, msg)
}

// ProbeQuiet lets p's next debug line through its throttle.
func ProbeQuiet(p *Route) { p.debugLogs.next.Store(0) }

// ProbeDie takes a slot of each of p's in-flight rules for scope s, with
// no identity, as a request would, and then dies: no renewal, no release.
func ProbeDie(ctx context.Context, p *Route, s rule.Scope) (Decision, error) {
	req := p.newSlotRequest(s)
	for i, r := range p.Slots {
		req.keys[i] = rule.BuildKey(&r.Base, p.Named, s, nil)
	}
	h, err := req.takeSlots(ctx)
	if h != nil {
		h.mu.Lock()
		h.stopped = true
		h.timer.Stop()
		h.mu.Unlock()
	}
	return req.d, err
}

// ProbeOverrides is how many overrides' rules the routes that follow p's
// overrides have compiled, and whether those overrides were loaded yet.
func ProbeOverrides(p *Route) (compiles int64, loaded bool) {
	p.live.mu.Lock()
	defer p.live.mu.Unlock()
	return p.live.compiles.Load(), p.live.ov != nil
}

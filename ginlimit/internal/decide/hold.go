package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// slotCall is a slot of one in-flight rule on one key (see holding.local).
type slotCall struct {
	rule *rule.InFlight
	key  string
}

// holding is what one request holds while its chain runs: a lease in
// Redis on each in-flight rule's key (renewed every lease/3), or slots of
// the in-process counts. It gives them back once, on release.
type holding struct {
	p      *Route
	req    *request // the in-flight step's: its keys are p.Slots'
	holder string
	ctx    context.Context // the request's values, never cancelled
	redis  bool            // holds (or may hold) a lease in Redis
	// uncertain: the acquire failed, so the lease is given back in the
	// background, best effort.
	uncertain bool
	local     []slotCall // the slots held in process

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// renewEvery is how often a lease is renewed: three times per lease, so
// that one failed renewal does not lose the slot.
func (h *holding) renewEvery() time.Duration {
	lease := h.p.Slots[0].Lease
	for _, r := range h.p.Slots[1:] {
		lease = min(lease, r.Lease)
	}
	return max(lease/3, time.Millisecond)
}

// renewLater schedules the next renewal renewEvery after the last began,
// spent ago, unless the holding was released. Counting from its start,
// not its end, keeps the renewals lease/3 apart at Redis however long each
// call took (a loaded machine, a slow reply): a call's time is not added
// to the gap the lease must cover.
func (h *holding) renewLater(spent time.Duration) {
	next := max(h.renewEvery()-spent, 0)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if h.timer == nil {
		h.timer = time.AfterFunc(next, h.renew)
		return
	}
	h.timer.Reset(next)
}

// renew extends the leases to now + lease. A lease that had already
// lapsed is not renewed (its slot may be someone else's by now): that, and
// a failed renewal, is logged. The renewal after a release does nothing
// (the script renews only a lease that is there).
func (h *holding) renew() {
	start := time.Now()
	p := h.p
	reply, _, err := p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, slotArgs(p.Clock, p.Slots, "renew", h.holder))
	if err == nil {
		if n, ok := one(reply); !ok {
			err = fmt.Errorf("unexpected reply %v", reply)
		} else if int(n) < len(h.req.keys) && !h.released() {
			err = errors.New("the lease lapsed while the handler ran: the slot may be serving another request")
		}
	}
	if err != nil {
		p.Logs.Log(h.ctx, p.Logger, slog.LevelWarn, "ginlimit: could not renew an in-flight slot",
			slog.String("route", h.req.scope.Label()), slog.String("rule", h.p.Slots[0].Name), ErrAttr(err))
	}
	h.renewLater(time.Since(start))
}

// one returns the one integer of a reply {n}.
func one(reply []int64) (int64, bool) {
	if len(reply) != 1 {
		return 0, false
	}
	return reply[0], true
}

// released reports whether the holding was released.
func (h *holding) released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// release gives back what the request holds: it stops the renewals, removes
// the leases from Redis (bounded by the Timeout; if that fails, the lease
// frees the slot, and a warning is logged) and gives back the in-process
// slots.
func (h *holding) release() {
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	if !h.redis {
		h.giveLocal()
		return
	}
	p := h.p
	if h.uncertain {
		h.giveLocal()
		go func() {
			_, _, _ = p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, slotArgs(p.Clock, p.Slots, "release", h.holder))
		}()
		return
	}
	// The in-process count keeps the slot until Redis has it back.
	defer h.giveLocal()
	_, _, err := p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, slotArgs(p.Clock, p.Slots, "release", h.holder))
	if err != nil {
		p.Logs.Log(h.ctx, p.Logger, slog.LevelWarn, "ginlimit: could not release an in-flight slot; its lease will free it",
			slog.String("route", h.req.scope.Label()), slog.String("rule", h.p.Slots[0].Name), ErrAttr(err))
	}
}

// errAllowInFlight is the error of Policy.Allow on a policy with in-flight
// rules.
var errAllowInFlight = errors.New("ginlimit: Policy.Allow: the policy has in-flight rules (InFlight), which hold a slot while a handler runs: attach it to a route with Limiter.RateLimit")

package console

import (
	"context"
	"sync"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// Observer gathers what the console needs from a Limiter's decisions, in
// bounded memory, until the next beat shares it: each route's and rule's
// decisions by outcome, the identities refused most on each rule (a
// Space-Saving summary of topK per rule), and the bans seen. Make it
// before the Limiter when the Limiter should report every route to it.
type Observer struct {
	mu      sync.Mutex
	rules   func() []ginlimit.RuleInfo   // set by Mount: how a refusal's identity is read
	byName  map[string]ginlimit.RuleInfo // rules by name, refreshed on a miss at most once a second
	fresh   time.Time                    // when byName was made
	traffic map[series]int64
	refused map[ruleKey]*topK
	bans    map[member]int64 // the ban's end, Unix ms
	sharing *gathered        // what a beat took and has not yet read back from Redis
}

// gathered is what an Observer took for a beat: the pages still show it
// from the Observer until the beat has it in the fleet's copy.
type gathered struct {
	traffic map[series]int64
	refused map[ruleKey]*topK
	bans    map[member]int64
}

// series is one route's and rule's decisions of one outcome.
type series struct{ route, rule, outcome string }

// ruleKey is one rule on one route.
type ruleKey struct{ route, rule string }

// member is one identity of one rule on one route.
type member struct {
	ruleKey
	id string
}

// maxSeries bounds the series and bans an Observer keeps between beats:
// routes and rules are the application's, outcomes ginlimit's, so only a
// bug could reach it.
const maxSeries = 10_000

// NewObserver returns an Observer that has seen nothing.
func NewObserver() *Observer {
	return &Observer{traffic: map[series]int64{}, refused: map[ruleKey]*topK{}, bans: map[member]int64{}}
}

// Option returns the option that makes a Limiter, or a route, report its
// decisions to o: ginlimit.New(..., o.Option()).
func (o *Observer) Option() ginlimit.Option { return ginlimit.Observe(o.observe) }

// observe notes one decision.
func (o *Observer) observe(_ context.Context, e ginlimit.Event) {
	if e.Outcome == ginlimit.OutcomeReset || e.Route == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := series{e.Route, e.Rule, string(e.Outcome)}
	if _, ok := o.traffic[s]; ok || len(o.traffic) < maxSeries {
		o.traffic[s]++
	}
	if o.rules == nil {
		return
	}
	id, ok := o.identity(e)
	if !ok {
		return
	}
	k := ruleKey{e.Route, e.Rule}
	t := o.refused[k]
	if t == nil {
		if len(o.refused) >= maxSeries {
			return
		}
		t = newTopK(topKPerBeat)
		o.refused[k] = t
	}
	t.add(id, 1)
	if e.Outcome == ginlimit.OutcomeBanned && len(o.bans) < maxSeries {
		end := e.Decision.Time.Add(e.Decision.RetryAfter).UnixMilli()
		if e.Decision.Time.IsZero() {
			end = time.Now().Add(e.Decision.RetryAfter).UnixMilli()
		}
		m := member{k, id}
		o.bans[m] = max(o.bans[m], end)
	}
}

// identity is the identity of refusal e, as its rule's keys hold it.
func (o *Observer) identity(e ginlimit.Event) (string, bool) {
	ri, ok := o.byName[e.Rule]
	if !ok && time.Since(o.fresh) > time.Second {
		o.byName, o.fresh = map[string]ginlimit.RuleInfo{}, time.Now()
		for _, r := range o.rules() {
			o.byName[r.Rule] = r
		}
		ri, ok = o.byName[e.Rule]
	}
	if !ok {
		return "", false
	}
	return ri.Refused(e)
}

// take returns what o gathered since the last take, for a beat to share,
// and starts anew; the peeks still count what it took until shared or
// giveBack. One beat at a time takes.
func (o *Observer) take() (map[series]int64, map[ruleKey]*topK, map[member]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, r, b := o.traffic, o.refused, o.bans
	o.sharing = &gathered{t, r, b}
	o.traffic, o.refused, o.bans = map[series]int64{}, map[ruleKey]*topK{}, map[member]int64{}
	return t, r, b
}

// shared forgets what the last take took: the fleet's copy holds it now.
// The beat calls it holding the fleet's lock, so that a page, which takes
// that lock before o's, sees it in one place or the other, never neither
// nor both.
func (o *Observer) shared() {
	o.mu.Lock()
	o.sharing = nil
	o.mu.Unlock()
}

// giveBack puts back what a failed beat could not share, so the next one
// does; counts added since are kept.
func (o *Observer) giveBack(t map[series]int64, r map[ruleKey]*topK, b map[member]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sharing = nil
	for s, n := range t {
		if _, ok := o.traffic[s]; ok || len(o.traffic) < maxSeries {
			o.traffic[s] += n
		}
	}
	for k, tk := range r {
		cur := o.refused[k]
		if cur == nil {
			o.refused[k] = tk
			continue
		}
		for _, it := range tk.items() {
			cur.add(it.id, it.count)
		}
	}
	for m, end := range b {
		o.bans[m] = max(o.bans[m], end)
	}
}

// peekTraffic returns k's decisions by outcome since the last beat.
func (o *Observer) peekTraffic(k ruleKey) map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int64{}
	for _, g := range o.all() {
		for s, n := range g.traffic {
			if s.route == k.route && s.rule == k.rule {
				out[s.outcome] += n
			}
		}
	}
	return out
}

// peekRefused returns k's refused identities since the last beat.
func (o *Observer) peekRefused(k ruleKey) map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int64{}
	for _, g := range o.all() {
		if t := g.refused[k]; t != nil {
			for _, it := range t.list {
				out[it.id] += it.count
			}
		}
	}
	return out
}

// peekBans returns k's bans seen since the last beat.
func (o *Observer) peekBans(k ruleKey) map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int64{}
	for _, g := range o.all() {
		for m, end := range g.bans {
			if m.ruleKey == k {
				out[m.id] = max(out[m.id], end)
			}
		}
	}
	return out
}

// all is what o gathered since the last take, and what that take took
// while its beat is under way; o.mu is held.
func (o *Observer) all() []gathered {
	out := []gathered{{o.traffic, o.refused, o.bans}}
	if o.sharing != nil {
		out = append(out, *o.sharing)
	}
	return out
}

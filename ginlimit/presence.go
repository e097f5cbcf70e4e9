package ginlimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// InstancesKey is the Redis key under which the Limiters that share a
// Redis announce themselves, for [FailLocal] to divide each limit by how
// many they are: a sorted set of random instance ids (they name no host,
// process or user), each scored by when it expires. It is one key, so it
// works on Redis Cluster; an ACL must let the limiter read and write it.
const InstancesKey = "ginlimit:instances"

// HeartbeatPeriod and HeartbeatTTL set how a Limiter made by [New]
// announces itself while Redis answers: every HeartbeatPeriod it renews
// its id in [InstancesKey] for HeartbeatTTL, drops expired ids, and keeps
// the count for the FailLocal fallback of its routes; during an outage it
// keeps the last count it saw. Counting too few instances lets an outage
// admit too much, so a new instance is counted within one period, and a
// live one drops out only after a whole TTL of failed beats (a stall, an
// open breaker, lost beats). Counting too many only makes an outage admit
// less. [Limiter.Close] takes the id out.
const (
	HeartbeatPeriod = time.Second
	HeartbeatTTL    = 5 * HeartbeatPeriod
)

// presenceScript renews the id ARGV[1] in the set KEYS[1] for ARGV[2] ms,
// on Redis's clock, drops the ids expired, and replies how many are left.
var presenceScript = redis.NewScript(`local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {redis.call('ZCARD', KEYS[1])}`)

// leaveScript takes the id ARGV[1] out of the set KEYS[1], for Close.
var leaveScript = redis.NewScript(`return {redis.call('ZREM', KEYS[1], ARGV[1])}`)

// presence is a Limiter's count of the instances on one Redis client, and
// the heartbeat that keeps it (nil until it runs).
type presence struct {
	count  *state.Instances
	stop   context.CancelFunc
	done   chan struct{}
	engine *engine.Engine // what the heartbeat calls through
}

// instancesFor returns the count of instances that the FailLocal
// fallbacks of a route of rc divide its limits by. LocalInstances, when
// the route or the limiter gives it, is taken as it is: it overrides the
// heartbeat. Otherwise it is l's heartbeat count on rc's client, 1 until a
// beat has answered. On a limiter that beats, either count has not heard
// from Redis until its heartbeat first answers, and the fallback does not
// decide until then (see [FailLocal]). A limiter that does not beat counts
// 1, or LocalInstances, from the start: the one the package-level
// RateLimit makes for itself, which nothing would close, or one on a
// client that cannot be a map key (a struct holding a map, say), which
// gets no heartbeat of its own.
func (l *Limiter) instancesFor(rc *routeConfig) *state.Instances {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.presenceOn(rc.client)
	switch {
	case rc.localInstances > 0 && p != nil:
		return p.count.Fixed(rc.localInstances)
	case rc.localInstances > 0:
		return state.NewInstances(rc.localInstances)
	case p != nil:
		return p.count
	}
	return state.NewInstances(1)
}

// presenceOn returns l's count of the instances on client, made the first
// time; nil for a client that cannot be a map key. l.mu is held.
func (l *Limiter) presenceOn(client redis.Scripter) *presence {
	if !(engine.Config{Client: client}).Shareable() {
		return nil
	}
	if l.presence == nil {
		l.presence = map[redis.Scripter]*presence{}
	}
	p := l.presence[client]
	if p == nil {
		p = &presence{count: state.NewInstances(1)}
		if l.subscribe { // it beats (announce)
			p.count = state.NewHeartbeatCount()
		}
		l.presence[client] = p
	}
	return p
}

// announce starts l's heartbeat on client through e, unless it runs: one
// beat now, when Redis has answered so far, so that a Limiter has its
// count when New returns, and then one per HeartbeatPeriod until Close.
// A limiter whose routes all give LocalInstances beats too: the others
// count it. The beats go on the engine's lease lane (Engine.RunLease): off
// the request path, and never starved by a flood of decisions. l.mu is
// held.
func (l *Limiter) announce(client redis.Scripter, e *engine.Engine) {
	p := l.presenceOn(client)
	if p == nil || p.stop != nil {
		return // it cannot be kept, or it runs
	}
	if l.id == "" {
		id := make([]byte, 16)
		_, _ = rand.Read(id) // never fails (crypto/rand)
		l.id = hex.EncodeToString(id)
	}
	e.Prepare(presenceScript) // leaveScript is not: Close sends it whole if need be, and New waits for one load less
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done, p.engine = cancel, make(chan struct{}), e
	if e.Loaded() {
		p.beat(ctx, e, l.id)
	}
	go p.run(ctx, e, l.id)
}

// run beats every HeartbeatPeriod until ctx ends.
func (p *presence) run(ctx context.Context, e *engine.Engine, id string) {
	defer close(p.done)
	tick := time.NewTicker(HeartbeatPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.beat(ctx, e, id)
		}
	}
}

// beat renews id and takes the count Redis answers; when Redis does not
// answer, the count stays the last one seen. A beat waits at most one
// period, so beats never pile up.
func (p *presence) beat(ctx context.Context, e *engine.Engine, id string) {
	reply, _, err := e.RunLease(ctx, HeartbeatPeriod, presenceScript, []string{InstancesKey},
		[]any{id, HeartbeatTTL.Milliseconds()})
	if err != nil || len(reply) != 1 || reply[0] < 1 {
		return
	}
	p.count.Store(int(min(reply[0], 1e6)))
}

// silence stops every heartbeat of l, waits for them to end, and then
// takes l's id out of InstancesKey on each client (leave).
func (l *Limiter) silence() {
	l.mu.Lock()
	var running []*presence
	for _, p := range l.presence {
		if p.stop != nil {
			running = append(running, p)
		}
	}
	l.mu.Unlock()
	for _, p := range running {
		p.stop()
		<-p.done
	}
	var wg sync.WaitGroup
	for _, p := range running {
		wg.Go(func() { p.leave(l.id) })
	}
	wg.Wait()
}

// leave takes id out of InstancesKey, so that the instances that stay
// stop counting it at their next beat, not a HeartbeatTTL later: short
// lived Limiters would otherwise shrink every outage share. It is best
// effort, bounded as a beat is, and fails at once while the breaker is
// open: an id left behind expires within HeartbeatTTL anyway. An id whose
// beat Redis never answered is not there, and costs no call.
func (p *presence) leave(id string) {
	if !p.count.Heard() {
		return
	}
	_, _, _ = p.engine.RunLease(context.Background(), HeartbeatPeriod, leaveScript, []string{InstancesKey}, []any{id})
}

package ginlimit

import (
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// InstancesKey is the Redis key under which the Limiters that share a
// Redis announce themselves, for [FailLocal] to divide each limit by how
// many they are: a sorted set of random instance ids (they name no host,
// process or user), each scored by when it expires. It is one key, so it
// works on Redis Cluster; an ACL must let the limiter read and write it.
const InstancesKey = fleet.InstancesKey

// HeartbeatPeriod and HeartbeatTTL set how a Limiter made by [New]
// announces itself while Redis answers: every HeartbeatPeriod it renews
// its id in [InstancesKey] for HeartbeatTTL, drops expired ids, and keeps
// the count for the FailLocal fallback of its routes; during an outage it
// keeps the last count it saw. Counting too few instances lets an outage
// admit too much, so a new instance's first beat tells the others on
// [ResetChannel] (one that missed it counts the newcomer within a period),
// and a live one drops out only after a whole TTL of failed beats (a
// stall, an open breaker, lost beats). Counting too many only makes an
// outage admit less. The beats and the polls of the overrides
// ([OverridePoll]) take turns: an idle instance makes one Redis call
// every 1.5 s. [Limiter.Close] takes the id out.
const (
	HeartbeatPeriod = fleet.HeartbeatPeriod
	HeartbeatTTL    = fleet.HeartbeatTTL
)

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
	c := l.countOn(rc.client)
	switch {
	case rc.localInstances > 0 && c != nil:
		return c.Fixed(rc.localInstances)
	case rc.localInstances > 0:
		return state.NewInstances(rc.localInstances)
	case c != nil:
		return c
	}
	return state.NewInstances(1)
}

// countOn returns l's count of the instances on client, made the first
// time; nil for a client that cannot be a map key. l.mu is held.
func (l *Limiter) countOn(client redis.Scripter) *state.Instances {
	if !(engine.Config{Client: client}).Shareable() {
		return nil
	}
	if l.counts == nil {
		l.counts = map[redis.Scripter]*state.Instances{}
	}
	c := l.counts[client]
	if c == nil {
		c = state.NewInstances(1)
		if l.subscribe { // it beats (fleet.go)
			c = state.NewHeartbeatCount()
		}
		l.counts[client] = c
	}
	return c
}

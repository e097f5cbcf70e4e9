package engine

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The lease lane (Engine.Aside) has capacity of its own at every level
// a call can wait at, so that a flood of decisions on this process cannot
// make a lease it holds lapse, or lose its release, while Redis answers:
//
//   - slots of its own on each node (leaseSlots), never behind the
//     decisions queued for theirs;
//   - no auto-pipeliner, never behind its backlog;
//   - a connection pool of its own on each Redis server, with its own
//     dials: a go-redis client the engine makes (leasePool) from the
//     options of the client that serves the node (a plain client, a
//     cluster's master or a Ring's shard), whose leaseSlots connections
//     only the lane uses. Before, the lane shared the application's pool
//     with the decisions: under a flood its calls waited for a connection
//     the decisions held, or for a dial one of them had started ("waiting
//     for another call's dial"), and the lease lapsed.
//
// The lane's node (node.lease) is a node of its own, made on the lane's
// first call to the server: its pool, its slots, its down flag, its dials
// and its circuit breaker. The breaker is its own because a verdict on
// Redis is only as good as the calls it is drawn from: under a flood on a
// loaded machine, the decisions' calls can miss their Timeout waiting for
// this process, and open their breaker while Redis answers; the lane's
// calls wait on nothing of theirs. A Redis that does fail opens both, the
// lane's after as many of its own calls in a row. The engine closes the pools it made on
// Close, and never the application's client. A call of the lane after
// Close, and on a client whose pools the engine cannot see (a Scripter of
// another kind), goes through the application's client, on the lease slots
// of the server's node: capacity of its own in this process, but not in
// the pool.

// leaseDialTimeout bounds a dial of a lease pool's connection: a dial on a
// network that works takes milliseconds (TLS included), and a call of the
// lane waits for it no longer than its own Timeout anyway; the bound only
// ends the dial's goroutine in good time.
const leaseDialTimeout = time.Second

// leasePool returns a client of its own for the lease lane of the server
// of pool: the same server, credentials, TLS, database, dialer and
// OnConnect, with a pool of leaseSlots connections that only the lane
// uses. Its calls are bounded by their context (ContextTimeoutEnabled),
// and neither its calls nor its dials are retried by go-redis (node.call
// retries what is worth it, and a Redis that refuses connections then
// fails a renewal at once). It has none of pool's hooks, its go-redis
// Limiter, client-side cache or maintenance notifications: it runs the
// lane's few scripts and nothing else.
func leasePool(pool *redis.Client) *redis.Client {
	o := pool.Options()
	return redis.NewClient(&redis.Options{
		Network:                      o.Network,
		Addr:                         o.Addr,
		ClientName:                   o.ClientName,
		Dialer:                       o.Dialer,
		OnConnect:                    o.OnConnect,
		Protocol:                     o.Protocol,
		Username:                     o.Username,
		Password:                     o.Password,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		DB:                           o.DB,
		TLSConfig:                    o.TLSConfig,
		DisableIdentity:              o.DisableIdentity,
		//lint:ignore SA1019 go-redis still reads the deprecated spelling
		DisableIndentity: o.DisableIndentity,
		IdentitySuffix:   o.IdentitySuffix,
		//lint:ignore SA1019 a no-op flag today, copied so the lane's connections speak as the client's do
		UnstableResp3:            o.UnstableResp3,
		ReadBufferSize:           o.ReadBufferSize,
		WriteBufferSize:          o.WriteBufferSize,
		MaxRetries:               -1, // none
		DialTimeout:              min(o.DialTimeout, leaseDialTimeout),
		DialerRetries:            1,
		ReadTimeout:              unnormalised(o.ReadTimeout),
		WriteTimeout:             unnormalised(o.WriteTimeout),
		ContextTimeoutEnabled:    true,
		PoolSize:                 leaseSlots,
		MaxActiveConns:           leaseSlots,
		MaxIdleConns:             leaseSlots,
		ConnMaxIdleTime:          o.ConnMaxIdleTime,
		ConnMaxLifetime:          o.ConnMaxLifetime,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// unnormalised returns the value of a read or write timeout, as go-redis
// normalised it, that go-redis normalises to the same again: it reads 0
// as its default and -1 as none, and stores none as 0 and "no deadline at
// all" as -1.
func unnormalised(d time.Duration) time.Duration {
	switch d {
	case 0:
		return -1
	case -1:
		return -2
	}
	return d
}

// leaseNode returns the node of the lease lane of n's server, made on its
// first call, or n itself when the engine has closed its lease pools or
// cannot see n's (see the lane's comment above). The caller holds
// ns.leaseMu for reading until its call has ended, so that Close never
// closes a pool under a call.
func (ns *nodes) leaseNode(n *node) *node {
	if ns.leaseClosed || n.pool == nil || n.own {
		return n
	}
	n.leaseOnce.Do(func() {
		n.lease = &node{brk: newBreaker(ns.failures, ns.open), leases: make(chan struct{}, leaseSlots), pool: leasePool(n.pool), dialing: make(chan struct{}, 1), own: true, main: n}
	})
	if n.lease == nil {
		return n // a Ring shard's node that left the Ring (addShard closed its pool)
	}
	return n.lease
}

// outage returns the health n's calls are noted in: the lease lane's node
// notes in its server's node, so that an outage is reported once per
// server, whichever lane's call finds it first, and its end whichever
// lane's call is answered first.
func (n *node) outage() *health {
	if n.own {
		return &n.main.health
	}
	return &n.health
}

// closeLeases closes the lease pools the engine made, once every call on
// them has ended; the lane's calls go through the application's client
// from then on.
func (ns *nodes) closeLeases() {
	ns.leaseMu.Lock()
	defer ns.leaseMu.Unlock()
	ns.leaseClosed = true
	closeLease(ns.one)
	for _, m := range []*sync.Map{&ns.byAddr, &ns.byShard} {
		m.Range(func(_, v any) bool {
			closeLease(v.(*node))
			return true
		})
	}
}

// closeLease closes the lease pool of n, if it made one. The caller holds
// ns.leaseMu.
func closeLease(n *node) {
	if n.lease != nil {
		_ = n.lease.pool.Close()
		n.lease = nil
	}
}

// redirected reports whether err is a cluster's redirection (MOVED or
// ASK): the lease pool of the master the engine found for the key no
// longer serves it, and the call goes through the cluster client, which
// follows the redirection and learns the new layout.
func redirected(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

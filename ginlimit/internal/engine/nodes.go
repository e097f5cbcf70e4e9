package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxWaiting is how many calls may wait for a slot of one node. Beyond
// that a decision is ErrSaturated at once: the process is taking decisions
// faster than Redis can answer them, and a longer queue only adds latency.
const maxWaiting = 10_000

// nodes is what an engine keeps per Redis server: one node for a plain
// client, one per master for a *redis.ClusterClient and one per shard for a
// *redis.Ring, so that a dead master or shard opens the breaker only for
// the keys it owns, and another's answers say nothing about it.
type nodes struct {
	failures int
	open     time.Duration
	slots    int
	one      *node
	cluster  *redis.ClusterClient
	ring     *redis.Ring
	byAddr   sync.Map   // master address -> *node
	byShard  sync.Map   // a Ring shard's *redis.Client -> *node
	shardMu  sync.Mutex // serialises adding a shard's node (and pruning)
	watch    Watcher    // told of each node's outages; nil for none (Engine.Watch)
	// leaseMu is held for reading by every call of the lease lane, and for
	// writing to close the lane's pools (see lease.go); leaseClosed is set
	// once they are closed.
	leaseMu     sync.RWMutex
	leaseClosed bool
}

// node is one Redis server's circuit breaker (nil when off) and slots: a
// call holds a slot while it is on the wire. pool is the go-redis client
// whose connection pool serves the node (a plain client, a cluster's master
// or a Ring's shard), nil for a client of another kind.
type node struct {
	brk     *Breaker
	slots   chan struct{}
	leases  chan struct{} // the slots of lease renewals and releases (Engine.Aside)
	waiting atomic.Int64
	pool    *redis.Client
	// lease is the node of the lease lane, with a pool of its own, made on
	// the lane's first call (leaseNode); own marks such a node, and main is
	// then the node it is the lane of.
	lease     *node
	leaseOnce sync.Once
	own       bool
	main      *node
	// answered counts the calls Redis answered within their Timeout: a
	// call that times out while it grows was not left waiting by Redis
	// (see node.judge).
	answered atomic.Uint64
	// stranded counts the calls this process abandoned at their Timeout
	// on a client that does not bound its reads by the context, and whose
	// connection still waits for Redis's reply: while there are any, a
	// full pool is Redis not answering, not the application's commands
	// (see node.judge).
	stranded atomic.Int64
	// down is set when a call to the server failed other than by a reply
	// of Redis, and cleared by a dial to the server that connects: while
	// it is set, a call first dials the server itself (see reach).
	down    atomic.Bool
	dialing chan struct{} // one reach dial at a time
	health  health        // the node's outage, for nodes.watch
}

func newNodes(client redis.Scripter, failures int, open time.Duration, slots int) *nodes {
	ns := &nodes{failures: failures, open: open, slots: slots}
	plain, _ := client.(*redis.Client)
	ns.one = ns.newNode(plain)
	ns.ring, _ = client.(*redis.Ring)
	ns.cluster, _ = client.(*redis.ClusterClient)
	return ns
}

func (ns *nodes) newNode(pool *redis.Client) *node {
	return &node{brk: newBreaker(ns.failures, ns.open), slots: make(chan struct{}, ns.slots), leases: make(chan struct{}, leaseSlots), pool: pool, dialing: make(chan struct{}, 1)}
}

// addShard returns shard's node, made now. A new shard client is the Ring
// changing (SetAddrs makes one for each new address and closes those it
// drops), so the nodes of the clients no longer in the Ring go: otherwise
// a Ring whose shards move (a failover, a rescheduled server) would keep
// a node, its closed client and its slots for every address it ever had.
func (ns *nodes) addShard(shard *redis.Client) *node {
	ns.shardMu.Lock()
	defer ns.shardMu.Unlock()
	if n, ok := ns.byShard.Load(shard); ok {
		return n.(*node)
	}
	var mu sync.Mutex
	live := map[*redis.Client]bool{}
	_ = ns.ring.ForEachShard(context.Background(), func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		live[c] = true
		mu.Unlock()
		return nil
	})
	var gone []*node
	ns.byShard.Range(func(k, v any) bool {
		if !live[k.(*redis.Client)] {
			ns.byShard.Delete(k)
			gone = append(gone, v.(*node))
		}
		return true
	})
	if len(gone) > 0 {
		// Their lease pools go too, once no call of the lane is on them.
		ns.leaseMu.Lock()
		for _, g := range gone {
			closeLease(g)
		}
		ns.leaseMu.Unlock()
	}
	n := ns.newNode(shard)
	ns.byShard.Store(shard, n)
	return n
}

// leaseSlots is how many lease renewals and releases (and heartbeats) a
// node has on the wire at once, and how many connections its lease pool
// has (see lease.go). They are few (a renewal per held slot per lease/3,
// a release per request that held one, a heartbeat a second) and small,
// so a handful keeps them from waiting behind one another, and costs the
// server a handful of connections per process.
const leaseSlots = 4

// acquire takes one of the node's slots of lane l, waiting no longer than
// ctx and queue, and, for decisions, only while fewer than maxWaiting calls
// wait.
func (n *node) acquire(ctx context.Context, l lane, queue time.Duration) error {
	slots := n.slots
	if l == leaseLane {
		slots = n.leases
	}
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	if l == decisionLane && n.waiting.Add(1) > maxWaiting {
		n.waiting.Add(-1)
		return fmt.Errorf("%w: %d decisions already wait for a Redis connection", ErrSaturated, maxWaiting)
	}
	if l == decisionLane {
		defer n.waiting.Add(-1)
	}
	timer := time.NewTimer(queue)
	defer timer.Stop()
	select {
	case slots <- struct{}{}:
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: %w", ErrSaturated, ErrQueueTimedOut)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx))
	}
}

// release gives back a slot of lane l.
func (n *node) release(l lane) {
	if l == leaseLane {
		<-n.leases
		return
	}
	<-n.slots
}

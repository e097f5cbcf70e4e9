package ginlimit

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

// nodes is what a backend keeps per Redis server: one node for a plain
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
}

// node is one Redis server's circuit breaker (nil when off) and slots: a
// call holds a slot while it is on the wire. pool is the go-redis client
// whose connection pool serves the node (a plain client, a cluster's master
// or a Ring's shard), nil for a client of another kind.
type node struct {
	brk     *breaker
	slots   chan struct{}
	leases  chan struct{} // the slots of lease renewals and releases (backend.runLease)
	waiting atomic.Int64
	pool    *redis.Client
	// answered counts the calls Redis answered within their Timeout: a
	// call that times out while it grows was not left waiting by Redis
	// (see backend.run).
	answered atomic.Uint64
	// stranded counts the calls this process abandoned at their Timeout
	// on a client that does not bound its reads by the context, and whose
	// connection still waits for Redis's reply: while there are any, a
	// full pool is Redis not answering, not the application's commands
	// (see backend.run).
	stranded atomic.Int64
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
	return &node{brk: newBreaker(ns.failures, ns.open), slots: make(chan struct{}, ns.slots), leases: make(chan struct{}, leaseSlots), pool: pool}
}

func (ns *nodes) isCluster() bool { return ns.cluster != nil }

// forKey returns the node that serves key. On a cluster, finding it can
// block until go-redis has loaded the cluster's slots, whatever the context
// says, so that runs within timeout, behind the breaker of the cluster as a
// whole (ns.one): a cluster whose slots cannot be loaded fails like a dead
// Redis, and fails fast once that breaker opens.
func (ns *nodes) forKey(ctx context.Context, timeout time.Duration, key string) (*node, error) {
	if ns.ring != nil {
		return ns.shardFor(key)
	}
	if ns.cluster == nil {
		return ns.one, nil
	}
	ok, probe := ns.one.brk.allow()
	if !ok {
		return ns.one, ErrCircuitOpen
	}
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	master, err := bounded(cctx, func() (*redis.Client, error) { return ns.cluster.MasterForKey(cctx, key) })
	if err != nil {
		if ctx.Err() != nil {
			ns.one.brk.abandon()
			return ns.one, fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx))
		}
		ns.one.brk.done(probe, true)
		return ns.one, fmt.Errorf("no master for the key: %w", err)
	}
	ns.one.brk.done(probe, false)
	addr := master.Options().Addr
	if n, ok := ns.byAddr.Load(addr); ok {
		return n.(*node), nil
	}
	n, _ := ns.byAddr.LoadOrStore(addr, ns.newNode(master))
	return n.(*node), nil
}

// shardFor returns the node of the Ring shard that serves key. The Ring
// finds it in memory; when it has no shard up, that is a Redis failure of
// the Ring as a whole (ns.one), and a shard found is its success.
func (ns *nodes) shardFor(key string) (*node, error) {
	shard, err := ns.ring.GetShardClientForKey(key)
	if err != nil {
		ok, probe := ns.one.brk.allow()
		if !ok {
			return ns.one, ErrCircuitOpen
		}
		ns.one.brk.done(probe, true)
		return ns.one, fmt.Errorf("no Ring shard for the key: %w", err)
	}
	// The Ring has a shard up again: its breaker, reported for decisions
	// that reach no node, closes (done is two loads when it is closed).
	ns.one.brk.done(false, false)
	if n, ok := ns.byShard.Load(shard); ok {
		return n.(*node), nil
	}
	return ns.addShard(shard), nil
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
	ns.byShard.Range(func(k, _ any) bool {
		if !live[k.(*redis.Client)] {
			ns.byShard.Delete(k)
		}
		return true
	})
	n := ns.newNode(shard)
	ns.byShard.Store(shard, n)
	return n
}

// state is the state of the breaker of the client as a whole, for
// decisions that reached no node's (a cached rejection, say).
func (ns *nodes) state() string { return ns.one.brk.state() }

// errQueueTimedOut is the cause of a wait for a slot that ran out of its
// QueueTimeout.
var errQueueTimedOut = fmt.Errorf("no Redis connection free within the QueueTimeout: %w", context.DeadlineExceeded)

// leaseSlots is how many lease renewals and releases a node has on the
// wire at once. They are few (a renewal per held slot per lease/3, a
// release per request that held one) and small, and they go directly to
// the connection pool, so a handful keeps them from waiting behind one
// another, while a burst of releases cannot take the pool from decisions.
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
		return fmt.Errorf("%w: %w", ErrSaturated, errQueueTimedOut)
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

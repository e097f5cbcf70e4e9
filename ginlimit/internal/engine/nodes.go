package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	ns.one.health.note(ns.watch, false, nil)
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
	ns.one.health.note(ns.watch, false, nil)
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

// call runs f, a call to the node's server, and fails fast when the server
// is gone. go-redis does not: a connection it cannot make is dialed
// DialerRetries times (5, 100 ms apart, by default), and its pool belongs
// to the application, so the engine cannot change that. So once a call has
// failed (down), the next one first dials the server itself (reach), once,
// as go-redis's pool does (the Options' Dialer, Network and Addr; a
// DialHook is not followed): a refused connection then fails the call at
// once, a connection that opens lets it go on to go-redis. A call whose
// connection broke (reset, or closed by the server) is made once more,
// when a dial shows the server takes connections: a healthy Redis that
// reset one connection (a restarted proxy, an idle timeout) fails no
// request, and a Redis that went away costs one refused dial. The script
// may have run before the connection broke, so this may count a request
// twice, as go-redis's own retry of a broken connection does. A call that
// ran out of its Timeout is a Redis failure only if Redis does not answer
// a PING either (see answers); otherwise it is ErrSaturated. start is when
// the call began (its Timeout counts from then). T is the reply's type.
func call[T any](ctx context.Context, n *node, start time.Time, f func() (T, error)) (T, error) {
	var none T
	if n.down.Load() {
		if err := n.reach(ctx); err != nil {
			return none, err
		}
		start = time.Now() // the call on the wire starts after the dial
	}
	answered := n.answered.Load()
	reply, err := f()
	if err == nil || !connFailure(err) {
		return reply, err
	}
	n.down.Store(true)
	if broken(err) {
		switch why := n.reach(ctx); {
		case why == nil:
			if reply, err = f(); err == nil || !connFailure(err) {
				return reply, err
			}
			n.down.Store(true)
		case !errors.Is(why, ErrSaturated):
			// Say why no new connection opens (refused, say): the broken
			// one's EOF alone does not tell that the server is gone. The
			// text only: the call is judged on its own error.
			err = fmt.Errorf("%w; a new connection: %v", err, why)
		}
	}
	err = deadlineOf(ctx, err)
	// A call that ran out of its Timeout (go-redis may report it as the
	// context's bare error) while no other call was answered, and not for
	// want of a pooled connection (judge tells that apart).
	timedOut := errors.Is(err, context.DeadlineExceeded) && errors.Is(cause(ctx), errTimedOut)
	if timedOut && n.answered.Load() == answered && !poolBusy(n.pool) {
		why := n.answers(ctx, start)
		if why == nil {
			return none, mayHaveRun{fmt.Errorf("%w: the call ran out of its Timeout, yet Redis answered a PING: this process read the reply late", ErrSaturated)}
		}
		if why != errNoPing && !errors.Is(why, context.DeadlineExceeded) {
			// go-redis reports a dial it was still retrying as the bare
			// deadline: say why Redis did not answer (refused, say). The
			// error is judged as before: why adds no timeout and no reply.
			err = fmt.Errorf("%w; a new connection: %w", err, why)
		}
	}
	return none, err
}

// answers returns nil when the node's server answers a PING within the
// Timeout of a call that started at start and ended at ctx's deadline,
// and otherwise why it does not. A call that ran out of its Timeout while
// no other call of the node was answered is taken for a Redis that does
// not answer; but when this process is not given the CPU for longer than
// the Timeout (busy loops on a small machine do that), every call in
// flight runs out of its Timeout together, their replies unread in the
// socket (Go reports a socket deadline that has passed before it reads
// what has arrived), and none is answered. The PING tells the two apart.
// The server is dialed meanwhile, as go-redis's pool would, but once, so
// that a PING that gets no answer has a cause: a refused connection, say,
// where go-redis, still retrying its dial, reports only that the time ran
// out. The verdict is the PING's alone. A Redis that hangs answers
// neither: each
// decision that finds it so (until the breaker opens, then its probes)
// waits up to twice the Timeout.
func (n *node) answers(ctx context.Context, start time.Time) error {
	if n.pool == nil {
		return errNoPing
	}
	d, ok := ctx.Deadline()
	if !ok {
		return errNoPing
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.Sub(start))
	defer cancel()
	dialed := make(chan error, 1)
	go func() { dialed <- n.dialOnce(pctx) }()
	_, err := bounded(pctx, func() (string, error) { return n.pool.Ping(pctx).Result() })
	if err == nil {
		return nil
	}
	if derr := <-dialed; derr != nil {
		return derr // refused, say: why the PING got no answer
	}
	return err
}

// dialOnce dials the node's server once, as go-redis's pool does, and
// closes the connection: nil when it connects, the dial's error when it
// does not, or ctx's cause when ctx ends first (a connection made later is
// closed then).
func (n *node) dialOnce(ctx context.Context) error {
	opt := n.pool.Options()
	done := make(chan net.Conn, 1)
	errc := make(chan error, 1)
	// In a goroutine, since a Dialer need not honour ctx (see reach).
	go func() {
		c, err := opt.Dialer(ctx, opt.Network, opt.Addr)
		if err != nil {
			errc <- err
			return
		}
		done <- c
	}()
	select {
	case c := <-done:
		_ = c.Close()
		return nil
	case err := <-errc:
		return err
	case <-ctx.Done():
		go func() {
			select {
			case c := <-done:
				_ = c.Close()
			case <-errc:
			}
		}()
		return context.Cause(ctx)
	}
}

// errNoPing is why answers cannot tell: a node of a client the engine does
// not know, or a call without a deadline.
var errNoPing = errors.New("no PING could be sent")

// deadlineOf returns ctx's cause for err, a call's error, when err is a
// socket timeout at ctx's deadline, and err otherwise. go-redis sets the
// socket's deadline to the context's, and the socket's timer may fire
// before the context's: the caller then learns why the call ended (the
// request's own deadline, or the Timeout) from ctx, which ends now.
func deadlineOf(ctx context.Context, err error) error {
	if !isNetTimeout(err) {
		return err
	}
	if d, ok := ctx.Deadline(); !ok || time.Now().Before(d) {
		return err
	}
	<-ctx.Done()
	return cause(ctx)
}

// reach returns nil when the node may be called: it is not down, or a
// dial to its server connects now (the connection is closed at once).
// Otherwise it returns the dial's error, or ctx's cause when ctx ends
// first. A node of a client the engine does not know is never dialed.
func (n *node) reach(ctx context.Context) error {
	if !n.down.Load() || n.pool == nil {
		return nil
	}
	select {
	case n.dialing <- struct{}{}:
	case <-ctx.Done():
		// Waiting for another call's dial is time in this process: the
		// dial that call makes gives the verdict on Redis.
		return fmt.Errorf("%w: waiting for another call's dial: %w", ErrSaturated, cause(ctx))
	}
	defer func() { <-n.dialing }()
	if !n.down.Load() {
		return nil // the dial of a call that waited before this one connected
	}
	opt := n.pool.Options()
	type dialed struct {
		conn net.Conn
		err  error
	}
	// In a goroutine, since a Dialer need not honour ctx (go-redis's own,
	// with TLS, is bounded by DialTimeout only).
	done := make(chan dialed, 1)
	go func() {
		c, err := opt.Dialer(ctx, opt.Network, opt.Addr)
		done <- dialed{c, err}
	}()
	select {
	case d := <-done:
		if d.err != nil {
			if ctx.Err() != nil {
				return cause(ctx)
			}
			return d.err
		}
		_ = d.conn.Close()
		n.down.Store(false)
		return nil
	case <-ctx.Done():
		go func() {
			if d := <-done; d.conn != nil {
				_ = d.conn.Close()
			}
		}()
		return cause(ctx)
	}
}

// connFailure reports whether err, a call's error, is the server's
// connection or time failing, rather than a reply of Redis (or a reply
// the engine could not read).
func connFailure(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// broken reports whether err says that a connection which was open broke:
// the server reset or closed it, as opposed to a dial that failed or a
// reply that did not come in time.
func broken(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Breaker is a node's consecutive-failure circuit breaker: after a
// threshold of Redis failures in a row it stops calling the node for a
// while, then lets a single probe through, whose success closes it. A nil
// *Breaker is no breaker: it lets every call through. It is safe for
// concurrent use and takes no lock.
type Breaker struct {
	threshold int32
	open      int64 // ns
	base      time.Time

	failures  atomic.Int32
	openUntil atomic.Int64 // ns since base; 0 when closed
	probing   atomic.Bool
}

// newBreaker returns a breaker, or nil for failures <= 0 (none). The
// caller checks that failures fits an int32.
func newBreaker(failures int, open time.Duration) *Breaker {
	if failures <= 0 {
		return nil
	}
	return &Breaker{threshold: int32(failures), open: int64(open), base: time.Now()}
}

func (b *Breaker) now() int64 { return int64(time.Since(b.base)) }

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe (which must be followed by done or abandon).
func (b *Breaker) allow() (ok, probe bool) {
	if b == nil {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if b.now() < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// done records a call's outcome.
func (b *Breaker) done(probe, failed bool) {
	if b == nil {
		return
	}
	if !failed {
		if b.openUntil.Load() != 0 || b.failures.Load() != 0 {
			b.failures.Store(0)
			b.openUntil.Store(0)
		}
		if probe {
			b.probing.Store(false)
		}
		return
	}
	if n := b.failures.Add(1); n >= b.threshold || probe {
		b.openUntil.Store(b.now() + b.open)
	}
	if probe {
		b.probing.Store(false)
	}
}

// abandon ends a probe that allow let through without a verdict on Redis
// (the call never reached it), so that the next call can probe.
func (b *Breaker) abandon() {
	if b != nil {
		b.probing.Store(false)
	}
}

// State returns "closed", "open" or "half-open", or "" for no breaker.
func (b *Breaker) State() string {
	if b == nil {
		return ""
	}
	until := b.openUntil.Load()
	switch {
	case until == 0:
		return "closed"
	case b.now() < until:
		return "open"
	}
	return "half-open"
}

// Failures returns how many Redis failures in a row the breaker has
// counted since a call last succeeded; 0 for no breaker.
func (b *Breaker) Failures() int {
	if b == nil {
		return 0
	}
	return int(b.failures.Load())
}

// unavailable reports whether err means Redis could not serve, as opposed to
// a reply error from a healthy server (WRONGTYPE on one bad key, say), which
// must not open the breaker for every other key of the same node.
func unavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // network errors, timeouts, closed pools
	}
	msg := rerr.Error()
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

package engine

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is what tells two engines apart: the client and the settings of
// its call path. A Config whose client is comparable can key a map (see
// Shareable), so that the routes on one client share one Engine.
type Config struct {
	// Client is the application's Redis client.
	Client redis.Scripter
	// BreakerFailures is how many Redis failures in a row open a node's
	// breaker; 0 (or less) means no breaker.
	BreakerFailures int
	// BreakerOpen is how long an open breaker stays open before it lets
	// one probe through.
	BreakerOpen time.Duration
	// AutoPipeline batches concurrent calls through go-redis's
	// auto-pipeliner, on a plain *redis.Client only.
	AutoPipeline bool
}

// Shareable reports whether c can be a map key: a client value that is not
// comparable (a struct holding a map, say) gets an Engine of its own on
// every route.
func (c Config) Shareable() bool {
	return reflect.ValueOf(c.Client).Comparable()
}

// Engine is the Redis call path of one client: it knows the scripts it is
// given, the circuit breakers, auto-pipelining and how a call is bounded in
// time, and nothing about HTTP or rules. It is safe for concurrent use.
type Engine struct {
	transport transport       // how a call reaches Redis once it has its node and slot
	nodes     *nodes          // the breaker and the slots of each node
	mu        sync.Mutex      // guards loaded, loading, prepared and deferred
	loaded    bool            // the scripts loaded: Redis answered
	loading   bool            // the start-up load runs on past New (see preload)
	prepared  map[string]bool // SHA1s of the scripts seen by Prepare
	deferred  []*redis.Script // prepared while loading: it loads them next
}

// New returns the engine of cfg's client and loads the scripts of preload
// on it, best effort (see Loaded). Its only error is an auto-pipeliner
// go-redis refused to make.
func New(cfg Config, preload ...*redis.Script) (*Engine, error) {
	e := &Engine{}
	t := &e.transport
	t.client, t.honours = cfg.Client, honoursContext(cfg.Client)
	_, t.cluster = cfg.Client.(*redis.ClusterClient)
	t.pipeAbove.Store(pipelineAbove)
	if c, ok := cfg.Client.(*redis.Client); ok && !t.honours {
		// A clone (the same pool) of the application's client, that bounds
		// socket reads by the call's deadline: no goroutine per call, and
		// the application's own client is left as it is.
		t.bound = ownClone(c)
	}
	if cfg.AutoPipeline {
		// Only a plain client: go-redis's cluster auto-pipeliner shares
		// batches across masters, so one dead master would stall the
		// others, and Ring does not auto-pipeline at all.
		if c, ok := cfg.Client.(*redis.Client); ok {
			// go-redis caches one async auto-pipeliner per *redis.Client,
			// shared by all its callers: the first caller's options win,
			// and its Close ends it for everyone. So the engine's is made
			// on a clone of the application's client (the same pool),
			// which caches its own: its options hold, the application's
			// own auto-pipeliner is left as it is, and Close ends only the
			// engine's.
			var err error
			if t.pipe, err = ownClone(c).AsyncAutoPipelineWithOptions(pipelineOptions()); err != nil {
				return nil, fmt.Errorf("auto-pipeliner: %w", err)
			}
		}
	}
	slots := poolSize(cfg.Client)
	if t.pipe != nil {
		slots *= PipelineDepth // calls share connections
	}
	e.nodes = newNodes(cfg.Client, cfg.BreakerFailures, cfg.BreakerOpen, slots)
	if t.bound != nil {
		e.nodes.one.pool = t.bound // the same pool, and the engine's options
	}
	if err := e.preload(preload); connFailure(err) {
		// A Redis that is down from the start fails the first call as
		// fast as the next ones (see node.call).
		e.nodes.one.down.Store(true)
	}
	return e, nil
}

// Close ends what the engine runs in the background: its auto-pipeliner,
// whose calls still waiting get an error, and the lease lane's own pools
// (see lease.go), once the lane's calls on them have ended; the lane's
// calls go through the application's client after that. It does not close
// the client, which is the application's.
func (e *Engine) Close() {
	if e.transport.pipe != nil {
		_ = e.transport.pipe.Close()
	}
	e.nodes.closeLeases()
}

// Loaded reports whether Redis answered the loading of the scripts so far
// (at New, and by every Prepare since): a caller may then expect Redis to
// answer soon.
func (e *Engine) Loaded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loaded
}

// preload loads scripts on a goroutine of its own and waits LoadTimeout at
// most for it: nil once every script loaded, the load's error when Redis
// refused it by then, errLoadGoesOn when it was still under way. A load
// that misses LoadTimeout (a slow start, a loaded machine) goes on to
// loadOnBound and then loads the scripts Prepare saw meanwhile, so a
// healthy Redis ends up with every script loaded however slowly it
// answered at first.
func (e *Engine) preload(scripts []*redis.Script) error {
	e.loading = true // e is not shared yet
	done := make(chan error, 1)
	go func() {
		for {
			err := e.load(loadOnBound, scripts...)
			e.mu.Lock()
			scripts, e.deferred = e.deferred, nil
			if err != nil || len(scripts) == 0 {
				e.loading, e.loaded = false, err == nil
				e.mu.Unlock()
				done <- err
				return
			}
			e.mu.Unlock()
		}
	}()
	wait := time.NewTimer(LoadTimeout)
	defer wait.Stop()
	select {
	case err := <-done:
		return err
	case <-wait.C:
		return errLoadGoesOn
	}
}

// errLoadGoesOn is preload's error when the load missed LoadTimeout. It is
// a deadline's, as it was when New cut the load off there, so that New
// still marks the server down (the first call dials it first, see call).
var errLoadGoesOn = fmt.Errorf("the scripts' load goes on past LoadTimeout: %w", context.DeadlineExceeded)

// loadOnBound bounds the start-up load once New has stopped waiting for it:
// nobody waits for it then, so it only keeps the goroutine from staying on
// a Redis that hung.
const loadOnBound = 5 * time.Second

// load loads scripts now, within bound, best effort, so that the first
// burst of calls does not meet NOSCRIPT and send each script twice. Run
// handles NOSCRIPT anyway, so a failure here costs nothing. It returns nil
// once every script loaded.
func (e *Engine) load(bound time.Duration, scripts ...*redis.Script) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := bounded(ctx, func() (struct{}, error) {
		for _, s := range scripts {
			if err := s.Load(ctx, e.transport.client).Err(); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// Prepare loads s on the engine's Redis once: at once when Redis answered
// so far (see Loaded), after the start-up load when that goes on past New
// (see preload), otherwise on its first call. A caller prepares the
// scripts it makes after New (one per distinct rule, say).
func (e *Engine) Prepare(s *redis.Script) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prepared[s.Hash()] {
		return
	}
	if e.prepared == nil {
		e.prepared = map[string]bool{}
	}
	e.prepared[s.Hash()] = true
	switch {
	case e.loading:
		e.deferred = append(e.deferred, s)
	case e.loaded:
		// After one failure, later scripts load on their first call, so a
		// Redis that hung since start-up delays each caller by no timeout.
		e.loaded = e.load(LoadTimeout, s) == nil
	}
}

// LoadTimeout bounds how long New and Prepare wait for loading the
// scripts. It is short because an engine may be made on a route's first
// request.
const LoadTimeout = 100 * time.Millisecond

// ownClone returns a clone of c (the same pools) for the engine's calls.
// It bounds socket reads by the call's deadline (ContextTimeoutEnabled),
// so a call needs no goroutine. And go-redis does not retry its calls
// (MaxRetries 0): its retry loop repeats a refused dial or a broken
// connection up to 3 times, with backoff, and each repeat dials again, so a
// Redis that refuses connections held every call until the Timeout.
// node.call retries instead, once, and only what is worth it. A clone has
// none of c's hooks (go-redis's WithTimeout does not copy them), so a
// client with ContextTimeoutEnabled is called as it is, hooks and retries
// included, except by the auto-pipeliner.
func ownClone(c *redis.Client) *redis.Client {
	own := c.WithTimeout(c.Options().ReadTimeout)
	opt := own.Options()
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 0 // the options are normalised already: 0 is none
	return own
}

// honoursContext reports whether client bounds its socket reads by the
// context deadline. go-redis does so only with ContextTimeoutEnabled; by
// default a read waits for the client's ReadTimeout (3 s), whatever the
// context says.
func honoursContext(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// pipelineOptions configures the engine's auto-pipeliner: go-redis's
// full-duplex engine, one held connection with a writer and a reader
// goroutine, so calls stream to Redis while earlier replies are read,
// instead of waiting for a batch's round trip. Ordering costs nothing
// here: the calls are independent.
func pipelineOptions() *redis.AutoPipelineOptions {
	o := redis.DefaultAutoPipelineOptions()
	o.FullDuplex = true
	return o
}

// PipelineDepth is how many auto-pipelined calls an engine lets share one
// connection of the pool.
const PipelineDepth = 64

// poolSize is the size of the client's connection pool per node: how many
// calls it can have on the wire at once without making one wait for a
// connection. For a client the engine does not know, go-redis's default.
func poolSize(client redis.Scripter) int {
	n, active := 0, 0
	switch c := client.(type) {
	case *redis.Client:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	case *redis.ClusterClient:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	case *redis.Ring:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	if active > 0 && active < n {
		n = active // go-redis refuses a connection beyond MaxActiveConns
	}
	return n
}

// pipelineAbove is how many calls of one engine must already be waiting
// on Redis before the next one is auto-pipelined. A lone call gains
// nothing from a pipeline and pays the hand-off to the pipeliner's
// goroutine, so light traffic takes the direct path and only concurrent
// traffic is batched.
const pipelineAbove = 2

// The clients the engine is built for; each is a redis.Scripter.
var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (redis.UniversalClient)(nil)
)

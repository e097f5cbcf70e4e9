package ginlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// The route options of the backend and of the request's handling. Those of
// a feature with a file of its own are there: DenyCache (denycache.go),
// OnFailure and LocalInstances (failure.go), Headers (response.go), Observe
// (decision.go).

// Redis sets the Redis backend. Any redis.Scripter works: *redis.Client,
// *redis.ClusterClient, *redis.Ring or a redis.UniversalClient. A route must
// get one, from its limiter or its own options. Redis 5 or newer is needed
// (the script reads TIME before it writes); 7 is what the tests run.
//
// Set ContextTimeoutEnabled on the client's options: without it, each call
// runs in a goroutine of its own, and one abandoned on a hung server holds
// its connection until the client's ReadTimeout. A [Limiter] keeps one
// backend per client (per route for a client value Go cannot compare),
// whose circuit breakers all its routes share. ginlimit never has more
// calls on the wire than the pool has connections (64 times that
// auto-pipelined); the rest wait up to [DefaultQueueTimeout]. Give ginlimit
// a client of its own, or a pool with room for the application's commands
// too: when they hold every connection, decisions get [ErrSaturated].
func Redis(client redis.Scripter) Option {
	return routeOption(func(r *routeConfig) error {
		if v := reflect.ValueOf(client); client == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			return errors.New("Redis(nil): the Redis client must not be nil")
		}
		r.client = client
		return nil
	})
}

// Timeout bounds how long Redis may take to answer a decision's call once
// it is sent, and so does the request's own deadline when it comes first
// (once the call is on the wire, a request cancelled without a deadline
// waits for the answer, at most d, since the script runs all the same);
// time spent waiting in this process for a connection is bounded by
// [DefaultQueueTimeout] instead. A call may be given up to d/64 more than d. A call
// that Redis does not answer in time counts as a Redis failure (the failure
// policy answers it, and the circuit breaker counts it) unless Redis
// answered this process's other calls, or a PING, meanwhile: then this
// process was late, and it is saturation ([ErrSaturated]). The default is
// [DefaultTimeout]. It must be positive.
func Timeout(d time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		if d <= 0 {
			return fmt.Errorf("Timeout(%v): the timeout must be positive", d)
		}
		r.timeout = d
		return nil
	})
}

// DefaultQueueTimeout bounds how long a decision may wait in this process
// for one of the backend's connections when every one is busy: the backend
// never has more calls on the wire than the client's pool has connections
// (64 times that when they are auto-pipelined), and the rest wait their
// turn, up to this bound and the request's own context. A decision that
// waited longer is not a Redis failure and does not open the breaker; it
// gets the saturation answer (see [ErrSaturated]): 503, never an
// admission. [Timeout] starts when the call has its connection.
const DefaultQueueTimeout = time.Second

// queueTimeout replaces [DefaultQueueTimeout]; tests shorten it. It must be
// positive.
func queueTimeout(d time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		if d <= 0 {
			return fmt.Errorf("queueTimeout(%v): the queue timeout must be positive", d)
		}
		r.queueTimeout = d
		return nil
	})
}

// withLogger sets the logger for Redis errors and configuration errors
// found while serving, so tests can read what is logged. Without it,
// ginlimit logs to slog.Default() at the time of logging.
func withLogger(l *slog.Logger) Option {
	return routeOption(func(r *routeConfig) error {
		if l == nil {
			return errors.New("withLogger(nil): the logger must not be nil")
		}
		r.logger = l
		return nil
	})
}

// autoPipeline turns the auto-pipeliner off (false) or on (true, the
// default); tests compare the two paths. With it, the decisions of
// concurrent requests stream to Redis on one held connection with
// go-redis's full-duplex AutoPipeliner while a few others of the backend
// are already waiting; each decision is still its own atomic script call
// bounded by [Timeout]. Only a *redis.Client is auto-pipelined: go-redis's
// cluster auto-pipeliner shares batches across masters (one dead master
// would stall the others) and Ring does not auto-pipeline.
func autoPipeline(enabled bool) Option {
	return routeOption(func(r *routeConfig) error {
		r.autoPipeline = enabled
		return nil
	})
}

// Shadow turns on shadow mode (a dry run): decisions are made and recorded
// as usual and the headers are sent, but a request that would be limited is
// let through; its decision has Shadow set and a debug line is logged. This
// is how to roll out a new limit safely: watch what it would do first. The
// default is off.
func Shadow(enabled bool) Option {
	return routeOption(func(r *routeConfig) error {
		r.shadow = enabled
		return nil
	})
}

// Respond replaces the default 429 body: f writes the response for every
// request the route refuses with 429 (for example the application's own
// envelope, or RFC 9457 problem+json) and the chain is then aborted. The
// rate limit headers are already set when f runs; the decision is also in
// [DecisionFrom]. If f writes nothing, the default body is written.
func Respond(f func(c *gin.Context, d Decision)) Option {
	return routeOption(func(r *routeConfig) error {
		if f == nil {
			return errors.New("Respond(nil): the function must not be nil")
		}
		r.respond = f
		return nil
	})
}

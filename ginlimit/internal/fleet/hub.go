package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// The reset hub: what an instance holds in process (the deny cache, and
// the FailLocal fallback's buckets) follows Redis in two ways. The hub's
// subscription also carries the fleet's other notices (fleet.go).
//
//   - Bounded staleness. Nothing the deny cache learns from Redis is kept
//     longer than the route's MaxStaleness (1 s by default), whatever
//     Redis said about when the key's quota grows. A change made behind
//     ginlimit's back (DEL, FLUSHALL, an eviction, a failover that lost
//     writes) is seen by every instance within that bound. For a flood on
//     one over-limit key this costs one Redis call per key, per instance,
//     per MaxStaleness.
//
//   - Resets are seen at once. Policy.Reset deletes the keys, then tells
//     every instance on one Redis pub/sub channel (ginlimit.ResetChannel),
//     the hub's channel; each one
//     drops what it holds for those keys and answers with an
//     acknowledgement on the same channel, and Reset returns once every
//     subscriber has answered (or after MaxStaleness, when the bound has
//     made every instance coherent anyway). A request sent after Reset
//     returned is decided on the reset count by every instance.
//
// Why pub/sub on one channel. Resets are rare, so one channel carries them
// all: PUBLISH returns how many subscribers received a message, which is
// what lets Reset wait for exactly that many acknowledgements. On a Redis
// Cluster the subscription connects to the master of the channel's slot,
// and ginlimit publishes through a script keyed by the channel name, which
// go-redis sends to the same master, so that count is exact there too
// (sharded pub/sub would do the same, but miniredis, which the demo and the
// fast tests run on, has no SPUBLISH). Client-side caching (CLIENT
// TRACKING) was the other candidate: it invalidates a key on every write,
// and every admission writes the key, so it would flood the very instances
// the deny cache exists to protect.
//
// An instance whose subscription is down (Redis unreachable, or a client
// without Subscribe) learns nothing new into its deny cache until it is
// subscribed again, and drops what it held when the subscription broke, so
// a reset it might have missed cannot be answered from its cache.

// hubPing is how long the reset subscription may be quiet before it is
// checked with a PING; a subscription that does not answer the PING
// within that time is taken as lost. The upkeep's echo (fleet.go) arrives
// every Tick, so a subscription that receives is never pinged.
const hubPing = 3 * Tick

// HubTimeout bounds each call the hub makes (an acknowledgement, a
// reset's announcement), in Redis and in the queue for a connection. It
// is longer than a decision's: a reset is rare, and its acknowledgements
// are what Reset waits for.
const HubTimeout = time.Second

// Subscriber is the part of go-redis's clients (Client, ClusterClient,
// Ring, UniversalClient) that the reset subscription needs.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Hub is one Redis client's side of coherence: its subscription to the
// reset channel, and the deny caches and fallbacks it keeps coherent. It
// knows neither rules nor the Redis call path: it subscribes through a
// [Subscriber] and publishes through a [Publish]. It is safe for
// concurrent use; its methods accept a nil *Hub (no subscription), whose
// caches learn everything they are told and forget nothing.
type Hub struct {
	channels []string        // the reset channel, then the instance's echo channel, if any
	publish  Publish         // sends a payload on the reset channel
	notice   func(string)    // receives the channel's other messages (fleet.go), or nil
	up       func()          // told when the subscription is back after a loss, or nil
	coh      state.Coherence // live: subscribed, and nothing lost since; its generation moves with every reset seen and every loss
	echoes   atomic.Int64    // messages heard on the echo channel, for tests

	mu      sync.Mutex
	caches  tracked[state.DenyCache]
	locals  tracked[state.Buckets]
	waiters map[string]*acks // by reset id
	visited int              // entries Track's pruning has looked at, for tests
	ps      *redis.PubSub    // once loop has subscribed

	first   chan struct{} // closed at the first confirmed subscription
	once    sync.Once
	closing chan struct{}
	stopped chan struct{}
}

// Publish sends payload on the hub's channel and returns how many
// subscribers received it. It must bound its own time: the hub calls it
// with a context bounded by HubTimeout.
type Publish func(ctx context.Context, payload string) (int64, error)

// StartHub subscribes sub to channels (the reset channel first) and keeps
// the subscription up until Close; the hub acknowledges resets, and
// Announce announces them, through publish. wait bounds how long it waits
// for the subscription to be confirmed.
func StartHub(sub Subscriber, channels []string, publish Publish, wait time.Duration) *Hub {
	return startHub(&Hub{channels: channels, publish: publish}, sub, wait)
}

// startHub starts h, whose channels, publish and callbacks are set, on sub.
func startHub(h *Hub, sub Subscriber, wait time.Duration) *Hub {
	h.waiters = map[string]*acks{}
	h.first, h.closing, h.stopped = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go h.loop(sub)
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-h.first:
		case <-timer.C:
		}
	}
	return h
}

// Close ends the subscription and waits for its goroutine. A nil hub
// does nothing.
func (h *Hub) Close() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.mu.Lock()
		close(h.closing)
		ps := h.ps
		h.mu.Unlock()
		if ps != nil {
			_ = ps.Close()
		}
	})
	<-h.stopped
}

// loop subscribes, then receives the channel's messages until Close,
// re-subscribing after a loss (go-redis reconnects on the next receive).
// It subscribes here rather than in StartHub because go-redis may block
// there (a Sentinel client looks its master up first) whatever the context.
func (h *Hub) loop(sub Subscriber) {
	defer close(h.stopped)
	ctx := context.Background()
	ps, ok := h.subscribeRetrying(ctx, sub)
	if !ok || !h.adopt(ps) {
		return
	}
	pinged, backoff := false, time.Duration(0)
	for {
		msg, err := ps.ReceiveTimeout(ctx, hubPing)
		select {
		case <-h.closing:
			return
		default:
		}
		if err != nil {
			if isNetTimeout(err) && !pinged {
				pinged = true
				if err := ps.Ping(ctx); err == nil {
					continue
				}
			}
			// Lost, or silent for a whole period after a PING: resets may
			// have been missed.
			h.Lose()
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			select {
			case <-h.closing:
				return
			case <-time.After(backoff):
			}
			continue
		}
		// Anything received says the subscription is up: after a reconnect
		// the first message is the subscription's confirmation, and after a
		// silent spell nothing was lost, only late (TCP keeps the order),
		// and everything sent before this message has been applied.
		pinged, backoff = false, 0
		if !h.coh.SetLive(true) {
			// Back up: no call that was out while it was down may keep
			// what it saw, and notices may have been missed.
			h.coh.Move()
			if h.up != nil {
				h.up()
			}
		}
		h.confirm()
		if m, ok := msg.(*redis.Message); ok && m.Channel == h.channels[0] {
			h.handle(m.Payload)
		} else if ok {
			h.echoes.Add(1)
		}
	}
}

// subscribeRetrying subscribes sub, trying again with a growing backoff
// until it succeeds; ok is false when the hub closes first.
func (h *Hub) subscribeRetrying(ctx context.Context, sub Subscriber) (ps *redis.PubSub, ok bool) {
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if ps, err := subscribe(ctx, sub, h.channels...); err == nil {
			return ps, true
		}
		select {
		case <-h.closing:
			return nil, false
		case <-time.After(backoff):
		}
	}
}

// adopt makes ps the hub's subscription, for Close to close it; when the
// hub is already closing it closes ps instead and returns false.
func (h *Hub) adopt(ps *redis.PubSub) bool {
	h.mu.Lock()
	select {
	case <-h.closing:
		h.mu.Unlock()
		_ = ps.Close()
		return false
	default:
	}
	h.ps = ps
	h.mu.Unlock()
	return true
}

// subscribe subscribes sub to channel. go-redis's Ring panics
// ("all ring shards are down") instead of returning an error when no shard
// is up, which would end the process from this background goroutine: the
// panic is returned as an error, and loop tries again.
func subscribe(ctx context.Context, sub Subscriber, channels ...string) (ps *redis.PubSub, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("subscribing to %s: %v", channels[0], r)
		}
	}()
	return sub.Subscribe(ctx, channels...), nil
}

// isNetTimeout reports whether err is a timeout of a network operation (a
// socket deadline, as ReceiveTimeout's), as opposed to a context's
// deadline, which implements net.Error too.
func isNetTimeout(err error) bool {
	var ne net.Error
	return !errors.Is(err, context.DeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

// Live reports whether the subscription is up: only then do the caches
// learn, and does Announce count acknowledgements. A nil hub is never live.
func (h *Hub) Live() bool { return h != nil && h.coh.Live() }

// confirm closes first, once.
func (h *Hub) confirm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.first:
	default:
		close(h.first)
	}
}

// Lose marks the subscription lost: nothing is learned until it is back,
// and what the caches hold is dropped, since a reset may have gone by.
func (h *Hub) Lose() {
	h.coh.Move()
	if !h.coh.SetLive(false) {
		return
	}
	for _, c := range h.liveCaches() {
		c.Clear()
	}
}

// Track makes the hub keep c and l coherent (either may be nil). It holds
// them weakly: once nothing else refers to them, they go. A registration
// costs O(1) amortized (see tracked.add), so a Limiter that compiles many
// rules, or overrides, does not pay for each the ones before it.
func (h *Hub) Track(c *state.DenyCache, l *state.Buckets) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c != nil {
		c.Follow(&h.coh)
		h.visited += h.caches.add(weak.Make(c))
	}
	if l != nil {
		h.visited += h.locals.add(weak.Make(l))
	}
}

// tracked is a list of weak pointers that drops those whose value is gone.
type tracked[T any] struct {
	ps      []weak.Pointer[T]
	pruneAt int // the length at which add drops the gone ones
}

// add appends p, first dropping the pointers whose value is gone when the
// list has doubled since the last time: each pass over n entries follows
// at least n/2 additions, so add is O(1) amortized, and the list is at
// most twice the entries in use (and 16). It returns how many entries it
// looked at.
func (t *tracked[T]) add(p weak.Pointer[T]) int {
	visited := 0
	if len(t.ps) >= t.pruneAt {
		visited = len(t.ps)
		out := t.ps[:0]
		for _, q := range t.ps {
			if q.Value() != nil {
				out = append(out, q)
			}
		}
		clear(t.ps[len(out):])
		t.ps = out
		t.pruneAt = max(2*len(out), 16)
	}
	t.ps = append(t.ps, p)
	return visited
}

// liveCaches returns the tracked deny caches still in use.
func (h *Hub) liveCaches() []*state.DenyCache {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*state.DenyCache, 0, len(h.caches.ps))
	for _, p := range h.caches.ps {
		if c := p.Value(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// The messages of resets on the channel: "reset <id> <JSON array of keys>"
// and "ack <id>". The fleet's notices (fleet.go) go to h.notice.
const (
	resetPrefix = "reset "
	ackPrefix   = "ack "
)

// handle applies one message of the channel.
func (h *Hub) handle(payload string) {
	switch {
	case strings.HasPrefix(payload, ackPrefix):
		h.mu.Lock()
		a := h.waiters[payload[len(ackPrefix):]]
		h.mu.Unlock()
		if a != nil {
			a.n.Add(1)
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	case strings.HasPrefix(payload, resetPrefix):
		id, rest, ok := strings.Cut(payload[len(resetPrefix):], " ")
		var keys []string
		if !ok || json.Unmarshal([]byte(rest), &keys) != nil {
			return // not ours
		}
		h.forget(keys)
		ctx, cancel := context.WithTimeout(context.Background(), HubTimeout)
		defer cancel()
		_, _ = h.publish(ctx, ackPrefix+id)
	case h.notice != nil:
		h.notice(payload)
	}
}

// forget drops what every tracked cache and fallback holds for keys. The
// generation moves first, so that no call already out can put back what
// it saw before the reset.
func (h *Hub) forget(keys []string) {
	h.coh.Move()
	for _, c := range h.liveCaches() {
		for _, k := range keys {
			c.Forget(k)
		}
	}
	h.mu.Lock()
	locals := make([]*state.Buckets, 0, len(h.locals.ps))
	for _, p := range h.locals.ps {
		if l := p.Value(); l != nil {
			locals = append(locals, l)
		}
	}
	h.mu.Unlock()
	for _, l := range locals {
		for _, k := range keys {
			l.Forget(k)
		}
	}
}

// acks counts the acknowledgements of one reset.
type acks struct {
	n    atomic.Int64
	wake chan struct{} // one pending signal at most
}

// Announce tells every instance that keys were reset, and returns once each
// subscriber has dropped what it held for them, or after wait (the
// staleness bound, after which every instance is coherent anyway). Without
// a live subscription of its own it cannot count the acknowledgements: it
// drops its own state, and waits out the bound if anyone else heard. h is
// nil without a subscription; publish sends on the reset channel.
func Announce(ctx context.Context, h *Hub, publish Publish, keys []string, wait time.Duration) error {
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	list, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	counting := h.Live()
	a := &acks{wake: make(chan struct{}, 1)}
	if counting {
		h.mu.Lock()
		h.waiters[id] = a
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			delete(h.waiters, id)
			h.mu.Unlock()
		}()
	} else if h != nil {
		h.forget(keys)
	}
	n, err := publish(ctx, resetPrefix+id+" "+string(list))
	if err != nil || n == 0 {
		return err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !counting || a.n.Load() < n {
		select {
		case <-a.wake:
		case <-timer.C:
			if !counting {
				return nil // waited out the bound
			}
			return errAckTimeout
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// errAckTimeout is returned by Announce when some subscriber did not
// acknowledge a reset within the staleness bound. The reset is done; that
// instance is coherent by the bound anyway.
var errAckTimeout = errors.New("not every instance acknowledged the reset within the staleness bound")

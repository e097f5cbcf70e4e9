package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/lua"
)

// The keys and channel the fleet shares, and its periods; package
// ginlimit exports them and documents each.
const (
	InstancesKey     = "ginlimit:instances"
	ResetChannel     = "ginlimit:reset"
	LimitsKey        = "{ginlimit:limits}"
	LimitsVersionKey = LimitsKey + ":version" // in LimitsKey's slot
	// Tick is the upkeep loop's period: one call per Tick. At 1.5 s an
	// idle instance makes 6 to 7 calls in 10 s, which leaves room under
	// one call a second for what an application adds on the same Redis
	// (the console's beat, one call per 5 s).
	Tick = 1500 * time.Millisecond
	// callBound bounds each upkeep call.
	callBound = time.Second
	// HeartbeatPeriod is how often an instance renews its id, every other
	// Tick; HeartbeatTTL how long an id lives without it.
	HeartbeatPeriod = 2 * Tick
	HeartbeatTTL    = 5 * HeartbeatPeriod
	// OverridePoll is how often, at the longest, an instance reads the
	// overrides' version: every other Tick on one that beats, every Tick
	// on one that does not.
	OverridePoll = 2 * Tick
)

// The fleet's scripts (lua/fleet).
var (
	beatScript    = redis.NewScript(lua.Fleet("beat"))
	leaveScript   = redis.NewScript(lua.Fleet("leave"))
	versionScript = redis.NewScript(lua.Fleet("limits_version"))
	loadScript    = redis.NewScript(lua.Fleet("limits_load"))
	setLimit      = redis.NewScript(lua.Fleet("set_limit"))
	publishScript = redis.NewScript(lua.Fleet("publish"))
	resetScript   = redis.NewScript(lua.Fleet("reset"))
)

// Scripts are the fleet's scripts that an engine loads at start-up.
func Scripts() []*redis.Script {
	return []*redis.Script{versionScript, loadScript, setLimit, publishScript, resetScript, beatScript}
}

// Config is what a Fleet is started with.
type Config struct {
	Engine *engine.Engine // every call goes through it (Engine.Aside)
	// Subscriber subscribes to ResetChannel; nil: no subscription, and the
	// fleet follows Redis by its polls alone.
	Subscriber Subscriber
	// Count is the count of instances that the heartbeat keeps; nil: the
	// fleet does not announce itself.
	Count *state.Instances
	// Loaded says whether Redis answered the engine's script load: then
	// Start beats, loads the overrides and waits for the subscription
	// before it returns, so that a new Limiter starts in step; else the
	// loop does the beat and the load at once (a driven fleet on its
	// first Touch), and Start waits for nothing.
	Loaded bool
	// Driven says that nothing will close the fleet: it runs no loop, and
	// a tick runs when Touch finds one due.
	Driven bool
	// OnLimits receives the overrides each time they change (and once
	// when they are first loaded), parsed with Canonical, one call at a
	// time.
	OnLimits  func(*Overrides)
	Canonical Canonical

	tick time.Duration // replaces Tick as the loop's period, in tests
}

// Fleet is one Limiter's upkeep on one Redis client. It is safe for
// concurrent use.
type Fleet struct {
	cfg  Config
	hub  *Hub   // nil without a subscription
	id   string // the instance's random id, in InstancesKey
	echo string // the instance's own channel

	refresh sync.Mutex   // one load of the overrides at a time
	version atomic.Int64 // of the overrides applied; -1 before the first
	stale   atomic.Bool  // a notice said the overrides changed
	turn    atomic.Uint64
	polls   atomic.Int64 // upkeep calls Redis answered, for tests
	last    atomic.Int64 // when Touch last ran a tick (Unix ns)
	kick    chan struct{}

	stop context.CancelFunc
	done chan struct{} // closed when the loop has ended; nil without one
}

// Start starts the upkeep of one Limiter on one Redis client.
func Start(cfg Config) *Fleet {
	id := make([]byte, 16)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	f := &Fleet{cfg: cfg, id: hex.EncodeToString(id), kick: make(chan struct{}, 1)}
	f.echo = ResetChannel + ":" + f.id
	f.version.Store(-1)
	if cfg.Loaded {
		// Start does the first tick's work; a driven fleet whose Redis
		// has not answered yet ticks on its first Touch instead.
		f.last.Store(time.Now().UnixNano())
	}
	if cfg.Count != nil {
		cfg.Engine.Prepare(beatScript)
	}
	if cfg.Loaded { // tried again by the loop when Redis does not answer
		if cfg.Count != nil {
			_ = f.beat(context.Background())
		}
		_ = f.load(context.Background())
	}
	if cfg.Subscriber != nil {
		wait := time.Duration(0)
		if cfg.Loaded {
			wait = subscribeWait // Redis answers: the subscription will not be long
		}
		f.hub = startHub(&Hub{channels: []string{ResetChannel, f.echo}, publish: f.publish, notice: f.notice, up: f.wake}, cfg.Subscriber, wait)
	}
	if !cfg.Driven {
		ctx, stop := context.WithCancel(context.Background())
		f.stop, f.done = stop, make(chan struct{})
		go f.run(ctx)
	}
	return f
}

// subscribeWait bounds how long Start waits for the subscription, when
// Redis answered the script load: the deny caches learn nothing until it
// is confirmed.
const subscribeWait = time.Second

// Hub is the fleet's reset hub, nil without a subscription.
func (f *Fleet) Hub() *Hub { return f.hub }

// Polls is how many upkeep calls Redis has answered, for tests.
func (f *Fleet) Polls() int64 { return f.polls.Load() }

// run ticks every Tick, and at once when a notice asks, until Close.
func (f *Fleet) run(ctx context.Context) {
	defer close(f.done)
	every := Tick
	if f.cfg.tick > 0 {
		every = f.cfg.tick
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	if !f.cfg.Loaded {
		// Start did not beat nor load the overrides (Redis had not
		// answered the script load): do it now, not a Tick later.
		if f.cfg.Count != nil {
			_ = f.beat(ctx)
		}
		_ = f.load(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			if f.stale.Load() { // else a load since has done it
				_ = f.load(ctx)
			}
		case <-tick.C:
			_ = f.Tick(ctx)
		}
	}
}

// Tick runs one tick of the upkeep now, as the loop does every Tick: one
// call, the heartbeat and the overrides' version in turn (the version
// alone on a fleet that does not announce), then the overrides' load
// when the version moved. Tests call it to drive the loop.
func (f *Fleet) Tick(ctx context.Context) error {
	if f.stale.Load() {
		return f.load(ctx)
	}
	if f.cfg.Count != nil && f.turn.Add(1)%2 == 1 {
		return f.beat(ctx)
	}
	reply, _, err := f.cfg.Engine.Aside(ctx, callBound, versionScript, []string{LimitsVersionKey}, []any{f.echo})
	if err != nil {
		return err
	}
	f.polls.Add(1)
	if len(reply) != 1 {
		return errors.New("unexpected overrides version reply")
	}
	if reply[0] == f.version.Load() {
		return nil
	}
	return f.load(ctx)
}

// Touch runs a tick, on a goroutine of its own, when the fleet is driven
// and the last is Tick old: the one caller that finds it so starts it and
// goes on at once, as the others do. It takes no context: no caller waits
// for it, and none can cut it short. A fleet with a loop ignores it.
func (f *Fleet) Touch() {
	if !f.cfg.Driven {
		return
	}
	now, last := time.Now().UnixNano(), f.last.Load()
	if now-last >= int64(Tick) && f.last.CompareAndSwap(last, now) {
		go func() { _ = f.Tick(context.Background()) }()
	}
}

// notice applies a notice of the channel: "limits <version>" or "join
// <count>"; anything else is not the fleet's.
func (f *Fleet) notice(payload string) {
	kind, arg, _ := strings.Cut(payload, " ")
	n, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil:
	case kind == "limits" && n != f.version.Load():
		f.wake()
	case kind == "join" && f.cfg.Count != nil && n > 0:
		f.cfg.Count.Raise(int(min(n, 1e6)))
	}
}

// wake asks the loop to load the overrides at once: a notice said they
// changed, or the subscription is back and notices may have been missed.
func (f *Fleet) wake() {
	f.stale.Store(true)
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Close stops the loop and waits for it, takes the instance's id out of
// InstancesKey (leave), and ends the subscription. Safe to call more than
// once.
func (f *Fleet) Close() {
	if f.done != nil {
		f.stop()
		<-f.done
	}
	if f.cfg.Count != nil {
		f.leave()
	}
	f.hub.Close()
}

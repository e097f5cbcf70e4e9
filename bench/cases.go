package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/lua"
)

// A decider takes one rate limit decision for key. It is what every case
// reduces to, so every case is measured by the same loop. It must be safe for
// concurrent use.
//
// A non-nil err means the call was not a decision of the limiter's store (a
// non-decision): for a peer, any error; for ginlimit, an error, a decision
// of the in-process fallback (Decision.Local) or a failed-open or
// failed-closed answer (see notDecided). allowed is then not counted.
type decider func(ctx context.Context, key string) (allowed bool, err error)

// benchCase is one way of deciding, with what the report needs to know
// about it.
type benchCase struct {
	// ID is the short name that -cases selects.
	ID string
	// Name is the name in the report.
	Name string
	// Algorithm says what the case keeps in Redis.
	Algorithm string
	// Floor marks the PING and no-op script cases, which decide nothing:
	// they are in the throughput tables only.
	Floor bool
	// Log marks the cases that keep one entry per admitted request (a
	// sorted-set member, or ginlimit's 4 bytes), whose memory is also given
	// per entry.
	Log bool
	// Exact marks the cases that must admit exactly the limit in a flood.
	Exact bool
	// Memory and Flood put the case in those sections.
	Memory, Flood bool
	// FloodOnly keeps the case out of the throughput tables: a variant whose
	// admitted decisions cost what another case's do, and that differs only
	// in what it does with rejections.
	FloodOnly bool
	// CostOnly keeps the case out of the throughput tables and the flood,
	// in the script-cost section (and the memory table when Memory is set):
	// a reference script, not a limiter anyone runs.
	CostOnly bool
	// Aligned marks a fixed window aligned on the Redis clock (multiples of
	// the window since the Unix epoch): a flood that crosses a boundary may
	// admit the limit once more, so flood.run starts it clear of one.
	Aligned bool
	// RedisKey maps a decision key to a KEYS pattern that matches the Redis
	// key the case writes for it, and no key of another case.
	RedisKey func(key string) string
	// Client is how the case's go-redis client is built: the zero value,
	// ContextTimeoutEnabled, unless the case says otherwise.
	Client clientKind
	// New builds the decider on rdb for limit requests per window.
	New func(rdb *redis.Client, limit int, window time.Duration) (decider, error)
	// Note is a footnote for the report, or "".
	Note string
}

// clientKind is how a case's go-redis client is built. Every case gets a
// fresh client of its kind, with go-redis's default pool (10 connections per
// GOMAXPROCS); the kinds differ only in ContextTimeoutEnabled.
type clientKind int

const (
	// ctxTimeoutClient is redis.NewClient(&redis.Options{Addr: addr,
	// ContextTimeoutEnabled: true}), the setting ginlimit's doc recommends:
	// context deadlines bound socket reads. The peers, the floors, the seeds'
	// recipe and the ginlimit variants use it.
	ctxTimeoutClient clientKind = iota
	// plainClient is redis.NewClient(&redis.Options{Addr: addr}), go-redis's
	// defaults: ginlimit then bounds each call's time itself (each call on a
	// goroutine of its own).
	plainClient
)

// newClient returns a client of kind k of the harness's Redis.
func (k clientKind) newClient(addr string) *redis.Client {
	if k == plainClient {
		return redis.NewClient(&redis.Options{Addr: addr})
	}
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// String returns the client's construction, for the report.
func (k clientKind) String() string {
	if k == plainClient {
		return "`redis.NewClient(&redis.Options{Addr: addr})`"
	}
	return "`redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})`"
}

// Short returns a short name of the client, for table cells.
func (k clientKind) Short() string {
	if k == plainClient {
		return "plain"
	}
	return "ContextTimeoutEnabled"
}

// allCases lists the cases in report order: the floors, the seeds' recipe,
// the peers, the raw scripts, then ginlimit's variants by algorithm.
func allCases() []*benchCase {
	return slices.Concat(floorCases(), seedsCases(), peerCases(), rawScriptCases(),
		ginlimitLogCases(), ginlimitCounterCases(), ginlimitFixedCases(), ginlimitBucketCases())
}

// floorCases returns the floors: a PING and a no-op script, which decide nothing.
func floorCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ping", Name: "floor: PING", Algorithm: "none", Floor: true,
			RedisKey: func(key string) string { return key },
			New: func(rdb *redis.Client, _ int, _ time.Duration) (decider, error) {
				return func(ctx context.Context, _ string) (bool, error) {
					return true, rdb.Ping(ctx).Err()
				}, nil
			},
		},
		{
			ID: "noop", Name: "floor: EVALSHA `return 1`", Algorithm: "none", Floor: true,
			RedisKey: func(key string) string { return key },
			New: func(rdb *redis.Client, _ int, _ time.Duration) (decider, error) {
				return func(ctx context.Context, key string) (bool, error) {
					n, err := noopScript.Run(ctx, rdb, []string{key}).Int64()
					return n == 1, err
				}, nil
			},
		},
	}
}

// seedsCases returns the seeds' recipe as published, and its variants for the
// script-cost and memory sections.
func seedsCases() []*benchCase {
	return []*benchCase{
		{
			ID: "seeds", Name: "seeds' recipe (ZSET, app clock)", Algorithm: "sliding log, ZSET, app clock in ms",
			Log: true, Exact: true, Memory: true, Flood: true,
			RedisKey: seedsKey,
			New:      newSeeds,
			Note: "The published Java recipe: ZREMRANGEBYSCORE 0 (now-window), ZCARD, then ZADD now member and " +
				"EXPIRE window-seconds if under the limit; now is the app's time.Now().UnixMilli() and the member is now-<16 random hex digits>.",
		},
		{
			ID: "seeds-short", Name: "seeds' recipe, shortest unique member", Algorithm: "sliding log, ZSET, app clock in ms",
			Log: true, Memory: true, CostOnly: true,
			RedisKey: func(key string) string { return "seeds-short:" + key },
			New:      newSeedsShort,
			Note: "The seeds' recipe with the shortest member that is unique in one process: a counter in base 36 " +
				"(1 to 4 bytes here), where the published recipe's is now-<16 hex digits> (30 bytes). " +
				"A fleet would need an instance's tag too; this is the recipe's floor. In the script-cost and memory sections only.",
		},
		{
			ID: "seeds-time", Name: "seeds' recipe on the Redis clock (TIME)", Algorithm: "sliding log, ZSET, Redis clock in ms",
			CostOnly: true,
			RedisKey: func(key string) string { return "seeds-time:" + key },
			New:      newSeedsOnRedisTime,
			Note: "The seeds' recipe with one change: the script reads the Redis clock (TIME, in ms) instead of taking the app's, " +
				"as every ginlimit script does. In the script-cost section only: it shows what the Redis clock alone costs Redis.",
		},
	}
}

// peerCases returns the other libraries ginlimit is compared with.
func peerCases() []*benchCase {
	return []*benchCase{
		{
			ID: "redis_rate", Name: "redis_rate v10 (GCRA)", Algorithm: "GCRA, one string per key",
			Memory: true, Flood: true,
			RedisKey: func(key string) string { return "rate:" + key },
			New:      newRedisRate,
			Note:     "limiter.Allow(ctx, key, redis_rate.Limit{Rate: limit, Burst: limit, Period: window}).",
		},
		{
			ID: "ulule", Name: "ulule/limiter v3 (fixed window)", Algorithm: "fixed window, one counter per key",
			Exact: true, Memory: true, Flood: true,
			RedisKey: func(key string) string { return ululePrefix + ":" + key },
			New:      newUlule,
			Note: "limiter.Get(ctx, key) on drivers/store/redis: one EVALSHA of an INCRBY+PEXPIRE script per decision " +
				"(no MULTI); a rejected request is counted too. Its window starts at a key's first request.",
		},
	}
}

// rawScriptCases returns ginlimit's scripts called raw, and the floor of a
// log in one string: the Redis work under ginlimit's own.
func rawScriptCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ginlimit-script", Name: "ginlimit's sliding-log script, raw EVALSHA", Algorithm: "sliding log, one string of 4-byte entries, Redis clock",
			RedisKey: func(key string) string { return "raw:{" + key + "}" },
			New:      newRawSlidingLog,
			Note: "The script ginlimit runs for one sliding-log rule (`lua.Single`), called with `Script.Run` on the case's client with the " +
				"arguments ginlimit sends, and nothing else: no deny cache, breaker, slots, key building or parsing. " +
				"A ginlimit sliding-log case's p50 over this one is ginlimit's own share; this one's over the EVALSHA no-op is the script's.",
		},
		{
			ID: "ginlimit-counter-script", Name: "ginlimit's sliding-counter script, raw EVALSHA", Algorithm: "sliding counter, Redis clock in µs",
			CostOnly: true,
			RedisKey: func(key string) string { return "raw-counter:{" + key + "}" },
			New:      newRawScript(ginlimit.SlidingCounter, ginlimit.DefaultSubWindows, "raw-counter:"),
			Note:     "As the sliding-log script raw, for the sliding counter (10 sub-windows); in the script-cost section only.",
		},
		{
			ID: "ginlimit-fixed-script", Name: "ginlimit's fixed-window script, raw EVALSHA", Algorithm: "fixed window, Redis clock in µs",
			CostOnly: true,
			RedisKey: func(key string) string { return "raw-fixed:{" + key + "}" },
			New:      newRawScript(ginlimit.FixedWindow, 0, "raw-fixed:"),
			Note:     "As the sliding-log script raw, for the fixed window; in the script-cost section only.",
		},
		{
			ID: "log-floor", Name: "floor: a log's own Redis work", Algorithm: "a 4-byte entry and a 63-byte trailer appended to one string, Redis clock",
			CostOnly: true,
			RedisKey: func(key string) string { return "log-floor:{" + key + "}" },
			New:      newLogFloor,
			Note: "Not a limiter: the Redis work that any log keeping its entries and its state in one string must do, and nothing more " +
				"(logFloorScript): TIME, a GETRANGE of the 63-byte trailer, a SETRANGE of the new entry and trailer where the old trailer was, " +
				"the packed reply; no validation, no window, and the string emptied every 128 entries. " +
				"Its µs/call over the fixed window's is what the log's shape costs whatever its Lua does.",
		},
		{
			ID: "ginlimit-bucket-script", Name: "ginlimit's token-bucket script, raw EVALSHA", Algorithm: "token bucket, Redis clock in µs",
			CostOnly: true,
			RedisKey: func(key string) string { return "raw-bucket:{" + key + "}" },
			New:      newRawScript(ginlimit.TokenBucket, 0, "raw-bucket:"),
			Note:     "As the sliding-log script raw, for the token bucket (burst = the limit); in the script-cost section only.",
		},
	}
}

// ginlimitLogCases returns ginlimit's sliding log with the deny cache off,
// with its defaults on each kind of client, and with the auto-pipeliner.
func ginlimitLogCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ginlimit", Name: "ginlimit sliding log, DenyCache(0)", Algorithm: "sliding log, one string of 4-byte entries, Redis clock",
			Log: true, Exact: true, Memory: true, Flood: true,
			RedisKey: ginlimitKey("bench:"),
			New:      newGinlimit("bench:", ginlimit.DenyCache(0)),
			Note:     "p.Allow(ctx, key, 1) with the deny cache off: every decision goes to Redis (the honest per-decision cost).",
		},
		{
			ID: "ginlimit-defaults-plain", Name: "ginlimit sliding log, defaults, plain client", Algorithm: "sliding log, one string of 4-byte entries, Redis clock",
			Exact: true, Flood: true, Client: plainClient,
			RedisKey: ginlimitKey("bench-defaults-plain:"),
			New:      newGinlimit("bench-defaults-plain:"),
			Note: "p.Allow(ctx, key, 1) with ginlimit's defaults (`ginlimit.New(ginlimit.Redis(rdb))`, then only Key, Window and Limit: " +
				"deny cache on, FailLocal, DefaultTimeout and DefaultQueueTimeout) on a plain client, `redis.NewClient(&redis.Options{Addr: addr})`: " +
				"ginlimit bounds each call's time itself.",
		},
		{
			ID: "ginlimit-defaults", Name: "ginlimit sliding log, defaults, ContextTimeoutEnabled client", Algorithm: "sliding log, one string of 4-byte entries, Redis clock",
			Exact: true, Flood: true,
			RedisKey: ginlimitKey("bench-defaults:"),
			New:      newGinlimit("bench-defaults:"),
			Note: "The same defaults on `redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})`, " +
				"the client every other case uses: go-redis bounds socket reads by the decision's deadline.",
		},
		{
			ID: "ginlimit-autopipeline", Name: "ginlimit sliding log + autopipeline, DenyCache(0)", Algorithm: "sliding log, one string of 4-byte entries, Redis clock",
			Exact:    true,
			RedisKey: ginlimitKey("bench-autopipeline:"),
			New:      newGinlimit("bench-autopipeline:", ginlimit.DenyCache(0)),
			Note:     "p.Allow(ctx, key, 1) with the deny cache off (the auto-pipeliner is on by default).",
		},
	}
}

// ginlimitCounterCases returns ginlimit's sliding counter with the deny cache
// off and with its defaults.
func ginlimitCounterCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ginlimit-counter", Name: "ginlimit sliding counter, DenyCache(0)", Algorithm: "sliding counter, one string of 10 sub-window counts, Redis clock in µs",
			Exact: true, Memory: true, Flood: true,
			RedisKey: ginlimitKey("bench-counter:"),
			New:      newGinlimit("bench-counter:", ginlimit.Algorithm(ginlimit.SlidingCounter), ginlimit.DenyCache(0)),
			Note: "p.Allow(ctx, key, 1) with Algorithm(SlidingCounter) (the default 10 sub-windows) and the deny cache off. " +
				"It counts the sub-windows that overlap the window: any span of 9/10 of the window admits at most the limit " +
				"(a whole window's length up to 2 × limit in the worst case); " +
				"the flood lasts far less than 9/10 of its window, so there it must admit exactly the limit.",
		},
		{
			ID: "ginlimit-counter-defaults", Name: "ginlimit sliding counter, defaults", Algorithm: "sliding counter, one string of 10 sub-window counts, Redis clock in µs",
			Exact: true, Flood: true, FloodOnly: true,
			RedisKey: ginlimitKey("bench-counter-defaults:"),
			New:      newGinlimit("bench-counter-defaults:", ginlimit.Algorithm(ginlimit.SlidingCounter)),
			Note:     "p.Allow(ctx, key, 1) with Algorithm(SlidingCounter) and otherwise ginlimit's defaults (deny cache on); flood only.",
		},
	}
}

// ginlimitFixedCases returns ginlimit's fixed window with the deny cache off
// and with its defaults.
func ginlimitFixedCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ginlimit-fixed", Name: "ginlimit fixed window, DenyCache(0)", Algorithm: "fixed window on the Redis clock, string {start, count}",
			Exact: true, Memory: true, Flood: true, Aligned: true,
			RedisKey: ginlimitKey("bench-fixed:"),
			New:      newGinlimit("bench-fixed:", ginlimit.Algorithm(ginlimit.FixedWindow), ginlimit.DenyCache(0)),
			Note: "p.Allow(ctx, key, 1) with Algorithm(FixedWindow) and the deny cache off. Its windows are aligned on the Redis clock " +
				"(unlike ulule's, which start at a key's first request) and a rejected request is not counted; " +
				"the flood is started clear of a window boundary.",
		},
		{
			ID: "ginlimit-fixed-defaults", Name: "ginlimit fixed window, defaults", Algorithm: "fixed window on the Redis clock, string {start, count}",
			Exact: true, Flood: true, FloodOnly: true, Aligned: true,
			RedisKey: ginlimitKey("bench-fixed-defaults:"),
			New:      newGinlimit("bench-fixed-defaults:", ginlimit.Algorithm(ginlimit.FixedWindow)),
			Note:     "p.Allow(ctx, key, 1) with Algorithm(FixedWindow) and otherwise ginlimit's defaults (deny cache on); flood only.",
		},
	}
}

// ginlimitBucketCases returns ginlimit's token bucket with the deny cache off
// and with its defaults.
func ginlimitBucketCases() []*benchCase {
	return []*benchCase{
		{
			ID: "ginlimit-bucket", Name: "ginlimit token bucket, DenyCache(0)", Algorithm: "token bucket (GCRA), one string per key, Redis clock in µs",
			Memory: true, Flood: true,
			RedisKey: ginlimitKey("bench-bucket:"),
			New:      newGinlimit("bench-bucket:", ginlimit.Algorithm(ginlimit.TokenBucket), ginlimit.DenyCache(0)),
			Note: "p.Allow(ctx, key, 1) with Algorithm(TokenBucket) and the deny cache off; the burst is the limit (the default), " +
				"refilled at limit per window, the same rule as the redis_rate case.",
		},
		{
			ID: "ginlimit-bucket-defaults", Name: "ginlimit token bucket, defaults", Algorithm: "token bucket (GCRA), one string per key, Redis clock in µs",
			Flood: true, FloodOnly: true,
			RedisKey: ginlimitKey("bench-bucket-defaults:"),
			New:      newGinlimit("bench-bucket-defaults:", ginlimit.Algorithm(ginlimit.TokenBucket)),
			Note: "p.Allow(ctx, key, 1) with Algorithm(TokenBucket) and otherwise ginlimit's defaults (deny cache on, burst = limit); flood only. " +
				"The cache holds a rejection until the next whole token.",
		},
	}
}

// selectCases returns the cases whose IDs are in filter (comma-separated), or
// all of them for an empty filter, and whether the HTTP section is selected.
func selectCases(filter string) ([]*benchCase, bool, error) {
	all := allCases()
	if strings.TrimSpace(filter) == "" {
		return all, true, nil
	}
	want := make(map[string]bool)
	for _, id := range strings.Split(filter, ",") {
		if id = strings.TrimSpace(id); id != "" {
			want[id] = true
		}
	}
	var out []*benchCase
	valid := []string{}
	for _, c := range all {
		valid = append(valid, c.ID)
		if want[c.ID] {
			out = append(out, c)
			delete(want, c.ID)
		}
	}
	http := want["http"]
	delete(want, "http")
	valid = append(valid, "http")
	for id := range want {
		return nil, false, fmt.Errorf("-cases: unknown case %q; the cases are %s", id, strings.Join(valid, ","))
	}
	return out, http, nil
}

// newRawSlidingLog runs ginlimit's single-rule sliding-log script directly,
// as a policy of limit per window builds it (see package lua): with the
// window in µs and the limit written into it, and a param of 0 (its keys
// have no older ZSET key to read), and called with the arguments such a
// policy sends: the Redis clock ("") and a cost of 1.
func newRawSlidingLog(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	return newRawScript(ginlimit.SlidingLog, 0, "raw:")(rdb, limit, window)
}

// newRawScript returns a constructor of deciders that run ginlimit's
// single-rule script of alg directly, built as a policy of limit per window
// builds it (with param, the algorithm's own setting, written in: the
// sliding log's 0, the counter's sub-windows, the bucket's burst,
// or 0 for the bucket's "burst = the limit"), on keys prefix{key}, with the
// arguments such a policy sends: the Redis clock ("") and a cost of 1.
func newRawScript(alg ginlimit.AlgorithmKind, param int64, prefix string) func(*redis.Client, int, time.Duration) (decider, error) {
	return func(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
		p := param
		if alg == ginlimit.TokenBucket && p == 0 {
			p = int64(limit)
		}
		script := redis.NewScript(lua.Single(string(alg), window.Microseconds(), int64(limit), p))
		args := []any{"", 1}
		return func(ctx context.Context, key string) (bool, error) {
			raw, err := script.Run(ctx, rdb, []string{prefix + "{" + key + "}"}, args...).Result()
			if err != nil {
				return false, err
			}
			reply, err := lua.Ints(raw) // the packed reply, decoded as ginlimit does
			if err != nil {
				return false, err
			}
			if len(reply) < 3 {
				return false, fmt.Errorf("%s script: reply of %d elements", alg, len(reply))
			}
			return reply[1] == 0, nil // fired: 0 when admitted
		}, nil
	}
}

// noopScript is the floor of a script call: EVALSHA of a script that does
// nothing.
var noopScript = redis.NewScript(noopLua)

// logFloorScript is the floor of a log in one string: what a decision
// that admits must do in Redis (read the state, append an entry and the
// state after it, reply as ginlimit's scripts do), with no logic. It admits
// while the string holds fewer than ARGV[1] entries, and empties the string
// every 128 entries, so that it stays as small as the log's.
var logFloorScript = redis.NewScript(logFloorSource)

// newLogFloor runs logFloorScript with the limit.
func newLogFloor(rdb *redis.Client, limit int, _ time.Duration) (decider, error) {
	return func(ctx context.Context, key string) (bool, error) {
		raw, err := logFloorScript.Run(ctx, rdb, []string{"log-floor:{" + key + "}"}, limit).Result()
		if err != nil {
			return false, err
		}
		reply, err := lua.Ints(raw)
		if err != nil || len(reply) < 2 {
			return false, fmt.Errorf("log floor: reply %v: %w", raw, err)
		}
		return reply[1] == 0, nil
	}, nil
}

// seedsScript is the ZSET sliding log of the Java articles the project
// started from, as published: the app's clock in milliseconds, EXPIRE in
// whole seconds, and a member that the app makes unique.
//
// KEYS[1] the ZSET; ARGV: now_ms, window_ms, limit, window_seconds, member.
var seedsScript = redis.NewScript(seedsSource)

func seedsKey(key string) string { return "seeds:" + key }

// seedsOnRedisTimeScript is the recipe with its one line that takes the
// app's clock (ARGV[1], then ignored) reading the Redis clock instead.
var seedsOnRedisTimeScript = redis.NewScript(strings.Replace(seedsSource,
	"local now = tonumber(ARGV[1])", redisClockLua, 1))

// newSeedsOnRedisTime is newSeeds on seedsOnRedisTimeScript.
func newSeedsOnRedisTime(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	return newSeedsWith(seedsOnRedisTimeScript, "seeds-time:")(rdb, limit, window)
}

// newSeedsShort returns the seeds' recipe with the shortest member unique
// in this process: a counter in base 36.
func newSeedsShort(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	windowMs := window.Milliseconds()
	windowSec := max(1, int64((window+time.Second-1)/time.Second))
	var seq atomic.Uint64
	return func(ctx context.Context, key string) (bool, error) {
		member := strconv.FormatUint(seq.Add(1), 36)
		n, err := seedsScript.Run(ctx, rdb, []string{"seeds-short:" + key}, time.Now().UnixMilli(), windowMs, limit, windowSec, member).Int64()
		return n == 1, err
	}, nil
}

// newSeeds returns the seeds' recipe: one EVALSHA per decision.
func newSeeds(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	return newSeedsWith(seedsScript, "seeds:")(rdb, limit, window)
}

// newSeedsWith returns a constructor of the seeds' recipe run by script (it
// takes seedsScript's arguments) on keys prefix+key.
func newSeedsWith(script *redis.Script, prefix string) func(*redis.Client, int, time.Duration) (decider, error) {
	return func(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
		return seedsDecider(rdb, script, prefix, limit, window), nil
	}
}

// seedsDecider is one decider of the seeds' recipe.
func seedsDecider(rdb *redis.Client, script *redis.Script, prefix string, limit int, window time.Duration) decider {
	windowMs := window.Milliseconds()
	windowSec := max(1, int64((window+time.Second-1)/time.Second))
	return func(ctx context.Context, key string) (bool, error) {
		now := time.Now().UnixMilli()
		var rnd [8]byte
		u := rand.Uint64()
		for i := range rnd {
			rnd[i] = byte(u >> (8 * i))
		}
		member := make([]byte, 0, 20+1+16) // now-<16 hex digits>, built without fmt
		member = strconv.AppendInt(member, now, 10)
		member = append(member, '-')
		member = hex.AppendEncode(member, rnd[:])
		n, err := script.Run(ctx, rdb, []string{prefix + key}, now, windowMs, limit, windowSec, member).Int64()
		return n == 1, err
	}
}

// ginlimitKey returns a KEYS pattern of the Redis key that ginlimit's
// Policy.Allow writes for a key with no bytes to escape: prefix<tag>{key},
// where the tag names the algorithm and its shape ("sl2:" for the sliding
// log, "fw2:" for the fixed window, ...; braces are not special in a
// pattern).
func ginlimitKey(prefix string) func(string) string {
	return func(key string) string { return prefix + "*{" + key + "}" }
}

// newGinlimit returns a constructor of ginlimit deciders: a Limiter on the
// client with nothing but Redis(rdb), and a Policy of prefix, the case's
// window and limit, and extra. Each variant has its own prefix, so variants
// never share a key.
func newGinlimit(prefix string, extra ...ginlimit.Option) func(*redis.Client, int, time.Duration) (decider, error) {
	return func(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
		l, err := ginlimit.New(ginlimit.Redis(rdb))
		if err != nil {
			return nil, err
		}
		opts := append([]ginlimit.Option{ginlimit.Key(prefix), ginlimit.Window(window), ginlimit.Limit(limit)}, extra...)
		p, err := l.Policy(opts...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := p.Allow(ctx, key, 1)
			return d.Allowed, notDecided(d, err)
		}, nil
	}
}

// errLocal stands for a decision of the FailLocal fallback that carried no
// error of its own (ginlimit always sets one today).
var errLocal = errors.New("decided by ginlimit's in-process fallback (Decision.Local)")

// notDecided returns why d, with Allow's err, is not a decision of Redis
// (or of the deny cache, whose answers Redis proved), or nil when it is one:
// an error from Allow or in the decision (a Redis failure, a timeout,
// ErrSaturated), a decision of the FailLocal fallback, or a failed-open or
// failed-closed answer (OutcomeError).
func notDecided(d ginlimit.Decision, err error) error {
	switch {
	case err != nil:
		return err
	case d.Err != nil:
		return d.Err
	case d.Local:
		return errLocal
	}
	return nil
}

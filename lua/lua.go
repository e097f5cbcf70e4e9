// Package lua holds the Redis Lua scripts that ginlimit runs, embedded from
// the .lua files beside this one so they can be read, reviewed and tested as
// Lua. Each file documents its details at its top.
//
// A script is assembled from these files:
//
//   - prologue.lua, the start of every script, after its driver's check of
//     the argument counts: it reads the clock (a test clock or Redis TIME)
//     into now, and provides pack and unpack_ints (Redis's struct library,
//     or its stand-in on miniredis). rule.lua defines int, an integer
//     check, and bad, which checks a rule's window, limit, param and cost
//     against the ranges below and names the first that is wrong:
//     [Several] runs it for every rule, [Single] only in its error branch.
//
//   - One file per algorithm (sliding_log.lua, sliding_counter.lua,
//     fixed_window.lua, token_bucket.lua): its comments and helper
//     functions (named after the file, as sliding_log_exact), then four
//     sections, each introduced by a marker line "-- @<section>":
//
//     validate: reads window, limit, param, cost; assigns invalid (nil, or what is wrong)
//     check:    reads key, window, limit, param, cost; assigns ok, a, b
//     commit:   reads key, window, limit, param, cost, a, b; assigns a, b
//     report:   reads key, window, limit, param, cost, ok, admitted, a, b; assigns remaining, reset, retry
//
//     A section is statements, not a function: it reads those names (and
//     now, peek, pack and unpack_ints), assigns its results to the names
//     it assigns, may leave early with break (it runs inside repeat ...
//     until true; a break inside a loop of its own ends only that loop),
//     never returns, declares no local of a name above, and assigns none
//     it does not own (its results, and a and b but in validate). So the
//     one text runs both inline, in [Single], which then makes no function
//     and calls none on its hot path, and wrapped in a function per
//     section, <name>_<section>(reads) returning what it assigns, in
//     [Several]. Plain values, so the hot path builds no table.
//
//     validate is the algorithm's own argument checks; check reads the
//     rule's state and says whether the rule alone admits the request; commit
//     records it; report gives what the reply says. a and b are the
//     algorithm's state between them (its file says what they are).
//
//     check only reads, and commit's first write is a command that can
//     grow memory (ZADD, SET, SETRANGE): Redis checks a script against
//     maxmemory only at its first write, and only when that command is one
//     of those, so an admission at maxmemory gets Redis's OOM error before
//     anything is written. Deletions of expired data (the sliding
//     log's ZREMRANGEBYSCORE) come after commit's first write, or in report when nothing is
//     committed, where Redis allows them even out of memory.
//
//   - One companion, penalty.lua, with the same four sections: it is never
//     a rule alone but goes before a rule in a [Several] call, refuses while
//     the identity is banned, and counts a refused request's strikes in its
//     report, starting a ban at its limit. Its report writes through pcall,
//     so that out of memory a strike is lost, never the decision. Scripts
//     define peek (false, or true for [Peek]) before the algorithms, so
//     that it records no strike on a Peek. [Algorithms] does not list it.
//
//   - Two drivers, which run those sections: single.lua decides one rule,
//     of the algorithm and with the settings it was built with ([Single]),
//     inline and with no loops, for the hot path; several.lua decides n
//     rules of any of the algorithms it
//     was built with ([Several]) atomically and all or nothing: it checks
//     every rule, commits every rule only if every one admits, then reports
//     every rule. lua.go generates the lines that tie a driver to its
//     algorithms' functions and numbers. [Peek] is several.lua built to
//     record nothing: what a request would be told, without counting it.
//
// [Several] takes, for n rules:
//
//	KEYS[i]            rule i's key (all in one cluster slot)
//	ARGV[1]            a test clock in µs (an integer, 0 to 2^53), or ""
//	                   for Redis TIME
//	ARGV[2 + 5*(i-1)]  rule i's algorithm number
//	ARGV[3 + 5*(i-1)]  its window in µs (an integer, 1000 to 1e15)
//	ARGV[4 + 5*(i-1)]  its limit (an integer, 1 to 1e9)
//	ARGV[5 + 5*(i-1)]  its param (an integer, 0 to 1e9): exact-below for
//	                   sliding_log; sub-windows for sliding_counter (1 to
//	                   1000, dividing the window); unused (0) for
//	                   fixed_window; burst for token_bucket (at least 1,
//	                   with burst*window at most 2^53)
//	ARGV[6 + 5*(i-1)]  the request's cost (an integer, 1 to 1e9, and at most
//	                   the limit, or the burst for token_bucket)
//
// so #ARGV is 1 + 5*#KEYS. [Single] has its rule's window, limit and param
// written into it, in the same ranges, and takes only KEYS[1], ARGV[1] (the
// clock, as above) and ARGV[2] (the cost). Both return one reply layout,
// 2 + 4n integers (n = 1 for [Single]),
//
//	{now_us, fired, then per rule: ok, remaining, reset_us, retry_us}
//
// where fired is the 1-based index of the first rule that rejected the
// request, 0 when it was admitted (and recorded under every rule); ok is 1
// when that rule alone admits it; retry_us is 0 unless the request was
// rejected and that rule does not admit it. The integers come as one bulk
// string of 8 bytes each, big-endian and two's complement (struct.pack's
// '>i8'), which [Ints] decodes: Redis turns a Lua table into an array reply
// at a fixed cost of several field lookups, about a third of a
// microsecond, which a string does not pay.
//
// Bad arguments give an error reply "ERR ginlimit: ..." that names the
// argument or setting (and, from [Several], the rule). [Single] tests its
// settings and cost with one cheap expression, and names what is wrong
// only once that has failed; ginlimit checks every rule once, at start-up,
// and never sends what the scripts refuse.
//
// # Costs
//
// The scripts run inside Redis one at a time, so their time per call sets
// the ceiling of one Redis: 1e6 ÷ µs per call decisions per second. Redis
// runs a script's whole text on every call: each function it defines is
// made again, each table reply is converted field by field, and each
// string.format or tonumber is a C call. So a rule's settings are written
// into its single-rule script, and only the clock and the cost travel (a
// cost of 1 is compared, not converted); the single-rule script runs the
// algorithm's sections inline, so its hot path makes no function and calls
// none of its own (rule.lua's only in the error branch; on the lab harness,
// Redis time per call fell 8-16 % for the fixed window, the bucket and the
// counter when the sections stopped being functions), replies with a string, keeps each
// key's state where one read gets it (a string for the counters and the
// bucket, read with one unpack; the sliding log's newest member), rewrites
// a string in place with SETRANGE where its expiry already covers it (a SET
// with an expiry costs Redis about a microsecond more), packs and unpacks
// with Redis's struct library, and gives Redis
// numbers rather than formatted strings where Redis reads a double (the
// scores of ZADD, ZRANGEBYSCORE, ZREMRANGEBYSCORE and ZCOUNT: Redis 7.0
// writes a Lua number with %.17g and 7.2 as the shortest exact decimal,
// both exact below 2^53). Arguments that Redis reads as integers (PEXPIRE,
// ranks) are never passed as numbers, as 7.2 may write 1e8 as
// "1e+08": those below 1e14 (milliseconds, counts, costs) are turned into
// text by concatenation with the empty string (Lua's %.14g: exact, with no
// exponent, below 1e14), which is an instruction rather than a call; larger
// ones (µs times) and ranks with string.format('%d').
// miniredis has no struct library; prologue.lua writes out the
// little of it the scripts use.
//
// Scripts are returned by functions, so no caller can change what another
// one runs.
package lua

//go:generate go run gen.go

import (
	"embed"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	//go:embed gen
	generated embed.FS
	//go:embed inflight.lua
	inflight string
)

// file returns the generated file named name, and panics if there is none:
// the generator writes every file this package reads.
func file(name string) string {
	b, err := generated.ReadFile("gen/" + name)
	if err != nil {
		panic(fmt.Sprintf("lua: %v: run go generate ./lua", err))
	}
	return string(b)
}

// InFlight returns the script of in-flight limits (inflight.lua, which
// documents its arguments and replies): it acquires, releases, renews and
// peeks slots leased on the Redis clock. It stands alone: no prologue, no
// driver.
func InFlight() string { return inflight }

// numbered lists the algorithms of the several-rule scripts by their
// number in ARGV: the four of [Algorithms], then the companion "penalty"
// (penalty.lua), which bans an identity after too many refusals and is
// never a rule alone.
var numbered = [...]string{"sliding_log", "sliding_counter", "fixed_window", "token_bucket", "penalty"}

// Algorithms returns the names of the algorithms this package has scripts
// for.
func Algorithms() []string {
	return slices.Clone(numbered[:len(numbered)-1])
}

// Numbered returns the names of the algorithms the several-rule scripts
// take, each at its number in their ARGV: those of [Algorithms], then
// "penalty".
func Numbered() []string { return slices.Clone(numbered[:]) }

// The ranges of a rule's settings and of a request's cost that every
// decision script accepts (rule.lua checks them in the scripts; Single
// checks them when it writes them in). ginlimit's options check the same.
const (
	MinWindow = 1000 // the shortest window, in µs (1 ms)
	MaxWindow = 1e15 // the longest window, in µs (about 31 years)
	MaxLimit  = 1e9  // the largest limit
	MaxParam  = 1e9  // the largest param (burst, sub-windows, exact-below, ban ms)
	MaxCost   = 1e9  // the largest cost of one request
)

// ExactBelow is the sliding log's param that ginlimit sends: below this
// remaining quota, and on every rejection, the script reports the exact
// time until the oldest entry leaves the window; above it, the window, an
// upper bound, which saves a read. ginlimit's deny cache counts a key's
// calls in flight below the same quota, so its bounds always have the
// exact reset they need.
const ExactBelow = 64

// The decision scripts' reply: ReplyHead integers, then ReplyPerRule for
// each rule, rule i's (from 0) field f at [At](i, f). The in-flight
// acquire replies the same head, then InFlightPerRule per key.
const (
	ReplyNow   = 0 // the Redis time, µs
	ReplyFired = 1 // the 1-based index of the first rule that rejected, 0 when admitted
	ReplyHead  = 2 // integers before the first rule's

	ReplyOK        = 0 // 1 when the rule alone admits the request
	ReplyRemaining = 1 // the rule's remaining quota
	ReplyReset     = 2 // µs until the rule's remaining grows
	ReplyRetry     = 3 // µs until the request would fit, 0 unless rejected and this rule refuses it
	ReplyPerRule   = 4 // integers per rule

	InFlightInUse   = 0 // the key's live leases
	InFlightPerRule = 1 // integers per key of the in-flight acquire
)

// At returns the index in a decision script's reply of field f (ReplyOK to
// ReplyRetry) of rule i, counted from 0.
func At(i, f int) int { return ReplyHead + ReplyPerRule*i + f }

// The scripts' arguments, as indices into the Go slice of arguments (Lua's
// ARGV[k+1] is the slice's k). Every script takes the clock first. The
// single-rule script then takes the cost; the several-rule scripts take
// ArgsPerRule per rule, rule i's at ArgRules + ArgsPerRule*i, its
// settings (ArgAlgorithm to ArgParam, the algorithm numbered as in
// [Numbered]) then its cost; the in-flight script the operation, the
// holder, then InFlightArgsPerRule per key.
const (
	ArgClock = 0 // a test clock in µs, or "" for Redis TIME

	SingleArgCost = 1 // the request's cost
	SingleArgs    = 2 // arguments of the single-rule script

	ArgRules     = 1 // where the first rule's arguments start
	ArgAlgorithm = 0 // the rule's algorithm number
	ArgWindow    = 1 // its window in µs
	ArgLimit     = 2 // its limit
	ArgParam     = 3 // its param
	ArgCost      = 4 // the request's cost under it
	ArgsPerRule  = 5 // arguments per rule

	InFlightArgOp       = 1 // "acquire", "release", "renew" or "peek"
	InFlightArgHolder   = 2 // the holder's id
	InFlightArgRules    = 3 // where the first key's arguments start
	InFlightArgLimit    = 0 // the key's limit
	InFlightArgLease    = 1 // its lease in µs
	InFlightArgsPerRule = 2 // arguments per key
)

// The placeholders of a generated single-rule script, which [Single]
// replaces with the rule's settings.
const (
	placeWindow = "@WINDOW@"
	placeLimit  = "@LIMIT@"
	placeParam  = "@PARAM@"
	placeBad    = "@SETTINGS_BAD@"
)

// Single returns the script that decides one rule of the algorithm named name
// ("sliding_log", "sliding_counter", "fixed_window" or "token_bucket") with
// the given window (µs), limit and param, which are written into the script
// (gen/single_<name>.lua, whose placeholders they replace): a call sends
// only the clock and the cost. Single checks the settings' ranges here,
// once, not on every call; when one is out of range, every call of the
// script replies with an error naming it, so a caller checks them first
// (ginlimit does, at start-up). It panics if name is unknown.
func Single(name string, window, limit, param int64) string {
	if !slices.Contains(Algorithms(), name) {
		panic(fmt.Sprintf("lua: unknown algorithm %q: want one of %s", name, strings.Join(Algorithms(), ", ")))
	}
	bad := window < MinWindow || window > MaxWindow || limit < 1 || limit > MaxLimit || param < 0 || param > MaxParam
	return strings.NewReplacer(
		placeWindow, strconv.FormatInt(window, 10),
		placeLimit, strconv.FormatInt(limit, 10),
		placeParam, strconv.FormatInt(param, 10),
		placeBad, strconv.FormatBool(bad),
	).Replace(file("single_" + name + ".lua"))
}

// Several returns the script that decides several rules at once, of the
// algorithms numbered as in [Numbered] (gen/several.lua).
func Several() string { return file("several.lua") }

// Peek returns the several-rule script that records nothing
// (gen/peek.lua): it takes [Several]'s arguments and gives its reply,
// where fired is the first rule that would reject the request and 0 when
// every rule would admit it, and each rule's report is the state of its
// key without the request (a sliding log's report may still delete entries
// that have left the window, which changes no decision).
func Peek() string { return file("peek.lua") }

// Ints decodes a script's reply into its integers: a string of 8 bytes per
// integer, big-endian and two's complement, as the scripts reply; or, from
// a fake that answers in their place, an array of integers.
func Ints(reply any) ([]int64, error) {
	switch r := reply.(type) {
	case string:
		if len(r)%8 != 0 {
			return nil, fmt.Errorf("unexpected reply of %d bytes", len(r))
		}
		out := make([]int64, len(r)/8)
		for i := range out {
			out[i] = int64(binary.BigEndian.Uint64([]byte(r[8*i : 8*i+8])))
		}
		return out, nil
	case []any:
		out := make([]int64, len(r))
		for i, v := range r {
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("unexpected reply element %d of type %T", i, v)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply of type %T", reply)
}

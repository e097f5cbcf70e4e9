// Package lua holds the Redis Lua scripts that ginlimit runs. What Redis
// runs is committed in gen/, so that a reviewer reads it whole:
//
//   - gen/single_<algorithm>.lua decides one rule of that algorithm
//     ([Single]), with the rule's settings as placeholders on its first
//     line of code, which Single replaces;
//   - gen/several.lua decides n rules of any algorithms, all or nothing
//     ([Several]), and gen/peek.lua is the same recording nothing ([Peek]);
//   - inflight.lua, written by hand, holds in-flight slots ([InFlight]).
//
// The generated files are made from the hand-written ones beside this file
// by go generate ./lua (gen.go, which runs package lua/internal/luagen,
// whose doc says how): a driver (single.lua, several.lua), prologue.lua
// and rule.lua, and one file per algorithm, each in four sections
// (validate, check, commit, report) that run inline in a single-rule
// script and as functions in the several-rule ones. Edit those, run go
// generate ./lua and commit both; a test fails while gen/ is out of date.
// Each file documents its details at its top.
//
// check only reads, and commit's first write is a command that can grow
// memory (ZADD, SET, SETRANGE): Redis checks a script against maxmemory
// only at its first write, and only when that command is one of those, so
// an admission at maxmemory gets Redis's OOM error before anything is
// written. Deletions of expired data come after commit's first write, or
// in report when nothing is committed, where Redis allows them even out of
// memory. The companion penalty.lua goes before a rule in a [Several]
// call: it refuses while the identity is banned and counts a refused
// request's strikes in its report, which writes through pcall, so that out
// of memory a strike is lost, never the decision.
//
// # Arguments and replies
//
// The constants below name every position. [Several] takes, for n rules,
// KEYS[i] rule i's key (all in one cluster slot) and the arguments
// ArgClock, a test clock in µs (an integer, 0 to 2^53) or "" for Redis
// TIME, then ArgsPerRule per rule from ArgRules: its algorithm's number in
// [Numbered], its window in µs (MinWindow to MaxWindow), its limit (1 to
// MaxLimit), its param (0 to MaxParam: for sliding_log, where its key's
// "sl2:" tag starts, or 0 (see sliding_log.lua);
// sub-windows for sliding_counter, 1 to 1000, dividing the window; unused
// for fixed_window; burst for token_bucket, at least 1, with burst*window
// at most 2^53) and the request's cost (1 to MaxCost, and at most the
// limit, or the burst). [Single] has its rule's settings written in and
// takes only KEYS[1], the clock and the cost (SingleArgCost). Both reply
// ReplyHead + ReplyPerRule*n integers (n = 1 for Single),
//
//	{now_us, fired, then per rule: ok, remaining, reset_us, retry_us}
//
// where fired is the 1-based index of the first rule that rejected the
// request, 0 when it was admitted (and recorded under every rule); ok is 1
// when that rule alone admits it; retry_us is 0 unless the request was
// rejected and that rule does not admit it. The integers come as one bulk
// string of 8 bytes each, big-endian and two's complement (struct.pack's
// '>i8'), which [Ints] decodes: Redis turns a Lua table into an array
// reply at a cost per field, which a string does not pay.
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
// the ceiling of one Redis. Redis runs a script's whole text on every
// call: each function it defines is made again, each table reply is
// converted field by field, and each string.format or tonumber is a C
// call. So a rule's settings are written into its single-rule script, and
// only the clock and the cost travel (a cost of 1 is compared, not
// converted); the single-rule script runs the algorithm's sections inline,
// so its hot path makes no function and calls none of its own (rule.lua's
// only in the error branch), replies with a string, keeps each key's state
// where one read gets it (a string for the counters and the bucket, read
// with one unpack; the sliding log's newest member), rewrites a string in
// place with SETRANGE where its expiry already covers it, packs and
// unpacks with Redis's struct library, and gives Redis numbers rather than
// formatted strings where Redis reads a double (the scores of ZADD,
// ZRANGEBYSCORE, ZREMRANGEBYSCORE and ZCOUNT: Redis 7.0 writes a Lua
// number with %.17g and 7.2 as the shortest exact decimal, both exact
// below 2^53). Arguments that Redis reads as integers (PEXPIRE, ranks) are
// never passed as numbers, as 7.2 may write 1e8 as "1e+08": those below
// 1e14 (milliseconds, counts, costs) are turned into text by concatenation
// with the empty string (Lua's %.14g: exact, with no exponent, below
// 1e14), which is an instruction rather than a call; larger ones (µs
// times) and ranks with string.format('%d'). miniredis has no struct
// library; prologue.lua writes out the little of it the scripts use.
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
	MaxParam  = 1e9  // the largest param (burst, sub-windows, the log's tag offset, ban ms)
	// MaxLogLimit is the largest limit of a sliding log, which keeps 4
	// bytes per unit in its window.
	MaxLogLimit = 100_000
	// MaxLogWindow is the longest window of a sliding log, in µs (24 days),
	// whose entries are 4-byte ms offsets from a base that moves on at most
	// every 2^31 ms.
	MaxLogWindow = 2_073_600_000_000
	MaxCost      = 1e9 // the largest cost of one request
)

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

//go:embed fleet/*.lua
var fleetScripts embed.FS

// Fleet returns the script fleet/<name>.lua, one of the scripts that keep
// the instances of an application in step (package fleet): beat, leave,
// limits_version, limits_load, set_limit, publish and reset. Each
// documents its arguments and reply at its top. It panics for another
// name: the callers name only these.
func Fleet(name string) string {
	b, err := fleetScripts.ReadFile("fleet/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua: no fleet script %q", name))
	}
	return string(b)
}

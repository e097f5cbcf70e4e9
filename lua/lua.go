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
// Scripts are returned by functions, assembled from the embedded files, so
// no caller can change what another one runs.
package lua

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

var (
	//go:embed prologue.lua
	prologue string
	//go:embed rule.lua
	ruleChecks string
	//go:embed single.lua
	single string
	//go:embed several.lua
	severalDriver string
	//go:embed sliding_log.lua
	slidingLog string
	//go:embed sliding_counter.lua
	slidingCounter string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed penalty.lua
	penalty string
	//go:embed inflight.lua
	inflight string
)

// InFlight returns the script of in-flight limits (inflight.lua, which
// documents its arguments and replies): it acquires, releases, renews and
// peeks slots leased on the Redis clock. It stands alone: no prologue, no
// driver.
func InFlight() string { return inflight }

// algorithms lists each algorithm's name, which also starts the names of
// the functions its file defines, and its file.
var algorithms = [...]struct{ name, src string }{
	{"sliding_log", slidingLog},
	{"sliding_counter", slidingCounter},
	{"fixed_window", fixedWindow},
	{"token_bucket", tokenBucket},
}

// companions lists the algorithms that are never a rule alone, only next
// to one in a [Several] call: "penalty" (penalty.lua), which bans an
// identity after too many refusals. [Algorithms] does not list them.
var companions = [...]struct{ name, src string }{
	{"penalty", penalty},
}

// algorithm returns the file of the algorithm or companion named name, and
// panics if there is none.
func algorithm(name string) string {
	for _, a := range append(algorithms[:], companions[:]...) {
		if a.name == name {
			return a.src
		}
	}
	panic(fmt.Sprintf("lua: unknown algorithm %q: want one of %s", name, strings.Join(Algorithms(), ", ")))
}

// Algorithms returns the names of the algorithms this package has scripts
// for.
func Algorithms() []string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.name
	}
	return names
}

// The ranges of a rule's settings and of a request's cost that every
// decision script accepts (rule.lua checks them in the scripts; Single
// checks them when it writes them in). ginlimit's options check the same.
const (
	MinWindow = 1000 // the shortest window, in µs (1 ms)
	MaxWindow = 1e15 // the longest window, in µs (about 31 years)
	MaxLimit  = 1e9  // the largest limit
	MaxParam  = 1e9  // the largest param (burst, sub-windows, exact-below)
	MaxCost   = 1e9  // the largest cost of one request
)

// Single returns the script that decides one rule of the algorithm named name
// ("sliding_log", "sliding_counter", "fixed_window" or "token_bucket") with
// the given window (µs), limit and param, which are written into the script
// (see single.lua): a call sends only the clock and the cost. The script
// runs the algorithm's sections inline. Single checks the settings' ranges
// here, once, not on every call; when one is out of range, every call of
// the script replies with an error naming it, so a caller checks them
// first (ginlimit does, at start-up). It panics if name is unknown.
func Single(name string, window, limit, param int64) string {
	alg := parts(name)
	head, tail := cut(single, "-- prologue.lua")
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(prologue)
	b.WriteString("local peek = false -- generated by lua.Single: a decision\n")
	b.WriteString(alg.helpers)
	// The ranges of rule.lua's bad, which names the setting when a call
	// finds settings_bad.
	bad := window < MinWindow || window > MaxWindow || limit < 1 || limit > MaxLimit || param < 0 || param > MaxParam
	fmt.Fprintf(&b, "\n-- Generated by lua.Single.\nlocal alg_name = '%s'\nlocal window, limit, param = %d, %d, %d\nlocal settings_bad = %t\n",
		name, window, limit, param, bad)
	// rule.lua goes inside the error branch, where its marker is, so that
	// the hot path does not make its functions.
	tail = splice(tail, "-- rule.lua", ruleChecks)
	for i, s := range sections {
		tail = splice(tail, "-- @"+s.name, alg.sections[i])
	}
	b.WriteString(tail)
	return b.String()
}

// sections are the parts of an algorithm's file, in the order the file
// gives them, with what each reads (besides now, peek, pack and
// unpack_ints from prologue.lua, and the file's helpers) and what it
// assigns. [Single] runs them inline; [Several] wraps each in a function,
// <algorithm>_<section>(reads), that returns what it assigns.
var sections = [...]struct{ name, reads, assigns string }{
	{"validate", "window, limit, param, cost", "invalid"},
	{"check", "key, window, limit, param, cost", "ok, a, b"},
	{"commit", "key, window, limit, param, cost, a, b", "a, b"},
	{"report", "key, window, limit, param, cost, ok, admitted, a, b", "remaining, reset, retry"},
}

// algorithmParts is an algorithm's file split at its section markers.
type algorithmParts struct {
	helpers  string // the text before the first section: its comments and helper functions
	sections [len(sections)]string
}

// parts splits the file of the algorithm or companion named name at its
// marker lines "-- @validate", "-- @check", "-- @commit" and "-- @report",
// which must each be there once, in that order. It panics if name is
// unknown or its file is not so.
func parts(name string) algorithmParts {
	rest := algorithm(name)
	var p algorithmParts
	for i, s := range sections {
		before, after, ok := strings.Cut(rest, "\n-- @"+s.name+"\n")
		if !ok {
			panic(fmt.Sprintf("lua: %s.lua has no \"-- @%s\" line after its earlier sections", name, s.name))
		}
		if i == 0 {
			p.helpers = before + "\n"
		} else {
			p.sections[i-1] = before + "\n"
		}
		rest = after
	}
	p.sections[len(sections)-1] = rest
	return p
}

// functions returns the sections of the algorithm named name wrapped as
// functions, after its helpers, for [Several].
func functions(name string) string {
	alg := parts(name)
	var b strings.Builder
	b.WriteString(alg.helpers)
	for i, s := range sections {
		fmt.Fprintf(&b, "\nlocal function %s_%s(%s)\n", name, s.name, s.reads)
		if !strings.Contains(s.reads, s.assigns) {
			fmt.Fprintf(&b, "  local %s\n", s.assigns)
		}
		fmt.Fprintf(&b, "  repeat\n%s  until true\n  return %s\nend\n", alg.sections[i], s.assigns)
	}
	return b.String()
}

// splice replaces the one line of text that is marker, once trimmed of its
// indentation, with insert, and panics if there is no such line.
func splice(text, marker, insert string) string {
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) == marker {
			before, after, _ := strings.Cut(text, line)
			return before + insert + after
		}
	}
	panic(fmt.Sprintf("lua: a driver has no %q line", marker))
}

// cut splits a driver at its marker line, which it drops, and panics if
// there is none.
func cut(driver, marker string) (before, after string) {
	before, after, ok := strings.Cut(driver, "\n"+marker+"\n")
	if !ok {
		panic(fmt.Sprintf("lua: a driver has no %q line", marker))
	}
	return before + "\n", after
}

// Several returns the script that decides several rules at once; names[i] is
// the algorithm numbered i in ARGV. A name may appear more than once. It
// panics if names is empty or has an unknown name.
func Several(names ...string) string {
	return several(false, names)
}

// Peek returns the several-rule script that records nothing: it takes
// [Several]'s arguments and gives its reply, where fired is the first rule
// that would reject the request and 0 when every rule would admit it, and
// each rule's report is the state of its key without the request (a
// sliding log's report may still delete entries that have left the window,
// which changes no decision). It panics as Several does.
func Peek(names ...string) string {
	return several(true, names)
}

func several(peek bool, names []string) string {
	if len(names) == 0 {
		panic("lua: Several needs at least one algorithm")
	}
	head, tail := cut(severalDriver, "-- prologue.lua")
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(prologue)
	fmt.Fprintf(&b, "local peek = %t -- generated by lua.Several or lua.Peek\n", peek)
	b.WriteString(ruleChecks)
	for i, name := range names {
		if !slices.Contains(names[:i], name) {
			b.WriteString(functions(name))
		}
	}
	b.WriteString("\n-- Generated by lua.Several.\nlocal algorithms = {")
	numbers := make([]string, len(names))
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%[1]d] = {%[2]s_validate, %[2]s_check, %[2]s_commit, %[2]s_report}", i, name)
		numbers[i] = fmt.Sprintf("%d (%s)", i, name)
	}
	fmt.Fprintf(&b, "}\nlocal algorithm_numbers = '%s'\n\n", strings.Join(numbers, ", "))
	b.WriteString(tail)
	return b.String()
}

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

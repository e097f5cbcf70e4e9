package ginlimit

// Reference models of the four algorithms, in plain Go, written from the
// semantics documented at the top of each script in lua/ and not from the
// scripts' code. model_random_test.go runs random timelines through a script
// and its model and compares every decision.
//
// Every model takes the time in microseconds, as the scripts do, and assumes
// it never goes back (the timelines only move forward). A model holds no
// TTLs: each script's key expires only once its state can no longer affect a
// decision, which the miniredis runs check by moving TTLs with the clock.

import (
	"fmt"
	"testing"
)

// rateModel decides one request of cost units at now (µs) and returns what
// the script replies: allowed, remaining, reset_us and retry_us (0 when
// allowed).
type rateModel interface {
	decide(now int64, cost int) (allowed bool, remaining int, resetUS, retryUS int64)
	// clone returns an independent copy, to ask what-if questions.
	clone() rateModel
}

var (
	_ rateModel = (*slidingLogModel)(nil)
	_ rateModel = (*slidingCounterModel)(nil)
	_ rateModel = (*fixedWindowModel)(nil)
	_ rateModel = (*tokenBucketModel)(nil)
)

// slidingLogModel is the exact sliding log: the window is (now-window, now],
// an admitted request is one entry of its cost, rejected requests are not
// recorded, and remaining, reset and retry are exact on every answer.
//
// The script records an admission at now rounded up to the millisecond
// (and never before its newest entry), and an entry leaves the window once
// that time is a window old: newSlidingLogModel does the same (unit 1000).
// idealLogModel records the microsecond itself (unit 1), the exact rule the
// sliding counter is measured against.
//
// The script keeps one entry per unit; the model keeps one entry of cost c
// for c units recorded at one time, which leave together: the retry of a
// request that needs k units to leave is when the entry holding the kth
// unit from the oldest leaves, the first entry whose running sum of costs
// reaches k, the same moment as with one entry per unit.
type slidingLogModel struct {
	window int64
	limit  int
	unit   int64             // entries are recorded at now rounded up to a multiple of it
	log    []slidingLogEntry // the entries still in the window, oldest first
	units  int               // the sum of their costs
}

// slidingLogEntry is one admitted request: the time (µs) it is recorded
// at, and its cost.
type slidingLogEntry struct {
	at   int64
	cost int
}

// newSlidingLogModel is the model of the sliding log's script, which
// records admissions to the millisecond.
func newSlidingLogModel(window int64, limit int) *slidingLogModel {
	return &slidingLogModel{window: window, limit: limit, unit: 1000}
}

// idealLogModel is an exact sliding log that records admissions to the
// microsecond.
func idealLogModel(window int64, limit int) *slidingLogModel {
	return &slidingLogModel{window: window, limit: limit, unit: 1}
}

// expire drops the entries that have left the window at now: an entry of
// exactly now-window has left.
func (m *slidingLogModel) expire(now int64) {
	i := 0
	for i < len(m.log) && m.log[i].at <= now-m.window {
		m.units -= m.log[i].cost
		i++
	}
	m.log = m.log[i:]
}

// inWindow is the number of units in the window at now.
func (m *slidingLogModel) inWindow(now int64) int {
	m.expire(now)
	return m.units
}

// record adds an entry of cost units admitted at now, whatever the limit:
// at now rounded up to the model's unit, and never before the newest entry.
func (m *slidingLogModel) record(now int64, cost int) {
	at := (now + m.unit - 1) / m.unit * m.unit
	if n := len(m.log); n > 0 {
		at = max(at, m.log[n-1].at)
	}
	m.log = append(m.log, slidingLogEntry{at, cost})
	m.units += cost
}

func (m *slidingLogModel) clone() rateModel {
	c := *m
	c.log = append([]slidingLogEntry(nil), m.log...)
	return &c
}

func (m *slidingLogModel) decide(now int64, cost int) (bool, int, int64, int64) {
	count := m.inWindow(now)
	if count+cost <= m.limit {
		m.record(now, cost)
		// The oldest entry leaving is the first moment remaining can grow.
		return true, m.limit - m.units, m.log[0].at + m.window - now, 0
	}
	// Rejected: count >= 1, since cost <= limit. The request fits once the
	// entry holding the (count+cost-limit)th unit from the oldest has left.
	k := count + cost - m.limit
	i, sum := 0, m.log[0].cost
	for sum < k {
		i++
		sum += m.log[i].cost
	}
	return false, m.limit - count, m.log[0].at + m.window - now, m.log[i].at + m.window - now
}

// fixedWindowModel counts per window aligned on multiples of the window.
type fixedWindowModel struct {
	window int64
	limit  int
	start  int64 // the start of the window count belongs to, or -1
	count  int
}

func newFixedWindowModel(window int64, limit int) *fixedWindowModel {
	return &fixedWindowModel{window: window, limit: limit, start: -1}
}

func (m *fixedWindowModel) clone() rateModel { c := *m; return &c }

func (m *fixedWindowModel) decide(now int64, cost int) (bool, int, int64, int64) {
	if start := now - now%m.window; start != m.start {
		m.start, m.count = start, 0
	}
	untilEnd := m.start + m.window - now // the count starts again from 0 then
	if m.count+cost > m.limit {
		return false, m.limit - m.count, untilEnd, untilEnd
	}
	m.count += cost
	return true, m.limit - m.count, untilEnd, 0
}

// slidingCounterModel divides the window into n sub-windows of window/n µs
// aligned on the clock; the count is the sum of the current sub-window and
// the n-1 before it. Sub-window i stops being counted at (i+n)*sub.
type slidingCounterModel struct {
	window int64
	limit  int
	n      int64
	units  map[int64]int // sub-window index (start / sub) -> units admitted in it
}

func newSlidingCounterModel(window int64, limit, n int) *slidingCounterModel {
	return &slidingCounterModel{window: window, limit: limit, n: int64(n), units: map[int64]int{}}
}

func (m *slidingCounterModel) clone() rateModel {
	c := *m
	c.units = make(map[int64]int, len(m.units))
	for i, u := range m.units {
		c.units[i] = u
	}
	return &c
}

func (m *slidingCounterModel) decide(now int64, cost int) (bool, int, int64, int64) {
	sub := m.window / m.n
	cur := now / sub
	oldest := cur - m.n + 1
	count := 0
	for i, u := range m.units {
		if i < oldest || i > cur {
			delete(m.units, i)
			continue
		}
		count += u
	}
	allowed := count+cost <= m.limit
	if allowed {
		m.units[cur] += cost
		count += cost
	}
	remaining := m.limit - count

	// Walk the counted sub-windows that hold units, oldest first: the first
	// one to leave is the reset (the next boundary when there is none); for a
	// rejection, retry is when the units that have left cover the excess.
	reset := (cur+1)*sub - now
	var retry int64
	excess := count + cost - m.limit
	left := 0
	first := true
	for i := oldest; i <= cur; i++ {
		u := m.units[i]
		if u == 0 {
			continue
		}
		leaves := (i+m.n)*sub - now
		if first {
			reset, first = leaves, false
		}
		left += u
		if !allowed && retry == 0 && left >= excess {
			retry = leaves
		}
	}
	return allowed, remaining, reset, retry
}

// tokenBucketModel is GCRA in exact integers, as the script documents:
// times in units of 1/limit µs, where one token is exactly window and the
// capacity exactly burst*window; the key stores the last admission's time
// and how far the TAT was then ahead of it.
type tokenBucketModel struct {
	window int64
	limit  int
	burst  int
	stored bool
	base   int64 // µs of the last admission
	ahead  int64 // 1/limit µs
}

func newTokenBucketModel(window int64, limit, burst int) *tokenBucketModel {
	return &tokenBucketModel{window: window, limit: limit, burst: burst}
}

func (m *tokenBucketModel) clone() rateModel { c := *m; return &c }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func (m *tokenBucketModel) decide(now int64, cost int) (bool, int, int64, int64) {
	limit := int64(m.limit)
	capacity := int64(m.burst) * m.window
	var ahead int64
	if m.stored {
		elapsed := now - m.base
		ahead = m.ahead
		if elapsed >= ceilDiv(ahead, limit) {
			ahead = 0
		} else if elapsed > 0 {
			ahead -= elapsed * limit
		}
	}
	newAhead := ahead + int64(cost)*m.window
	allowed := newAhead <= capacity
	var retry int64
	if allowed {
		ahead = newAhead
		m.stored, m.base, m.ahead = true, now, ahead
	} else {
		retry = ceilDiv(newAhead-capacity, limit)
	}
	room := capacity - ahead
	remaining := room / m.window
	reset := ceilDiv(ahead-(capacity-(remaining+1)*m.window), limit)
	return allowed, int(remaining), reset, retry
}

// modelResult is one decision, of a model or of a script.
type modelResult struct {
	allowed   bool
	remaining int
	reset     int64 // µs
	retry     int64 // µs, 0 when allowed
}

func (r modelResult) String() string {
	return fmt.Sprintf("allowed=%-5v remaining=%-3d reset=%dµs retry=%dµs", r.allowed, r.remaining, r.reset, r.retry)
}

func decideModel(m rateModel, now int64, cost int) modelResult {
	a, rem, reset, retry := m.decide(now, cost)
	return modelResult{a, rem, reset, retry}
}

// modelCompare returns why got (the script) differs from want (the model),
// or "": every field must be equal, the sliding log's remaining and reset
// included.
func modelCompare(got, want modelResult) string {
	if got.allowed != want.allowed || got.retry != want.retry {
		return "allowed or retry differ"
	}
	if got.remaining != want.remaining || got.reset != want.reset {
		return "remaining or reset differ"
	}
	return ""
}

// modelStep is one request of a hand-written table: at (µs after base),
// cost, and the decision the model must take.
type modelStep struct {
	at   int64
	cost int
	want modelResult
}

func runModelTable(t *testing.T, m rateModel, base int64, steps []modelStep) {
	t.Helper()
	for i, s := range steps {
		if got := decideModel(m, base+s.at, s.cost); got != s.want {
			t.Fatalf("step %d (base+%dµs, cost %d): model says %v, want %v", i, s.at, s.cost, got, s.want)
		}
	}
}

// The tables below check the models themselves against decisions worked out
// by hand from the scripts' documentation, so that the random comparison
// does not rest on two implementations sharing one misreading.

// modelTableBase is a clock in the same power-of-two range as today's µs
// clock, a multiple of every window below.
const modelTableBase int64 = 1_800_000_000_000_000

func TestModelSlidingLogTable(t *testing.T) {
	t.Parallel()
	const ms = 1000
	const w = 1000 * ms
	runModelTable(t, newSlidingLogModel(w, 2), modelTableBase, []modelStep{
		{0, 1, modelResult{true, 1, w, 0}},
		{100 * ms, 1, modelResult{true, 0, 900 * ms, 0}},
		{500 * ms, 1, modelResult{false, 0, 500 * ms, 500 * ms}},
		{500 * ms, 2, modelResult{false, 0, 500 * ms, 600 * ms}}, // both entries must leave
		{999 * ms, 1, modelResult{false, 0, 1 * ms, 1 * ms}},
		{1000 * ms, 1, modelResult{true, 0, 100 * ms, 0}}, // exactly a window old: left
		{1000 * ms, 1, modelResult{false, 0, 100 * ms, 100 * ms}},
		{1100 * ms, 2, modelResult{false, 1, 900 * ms, 900 * ms}}, // the entry at 1000 ms holds one unit
		{2000 * ms, 2, modelResult{true, 0, w, 0}},
	})
	// Weighted entries: an entry holds its whole cost, and the retry is when
	// the entry holding the unit that must leave has left.
	runModelTable(t, newSlidingLogModel(w, 10), modelTableBase, []modelStep{
		{0, 6, modelResult{true, 4, w, 0}},
		{100 * ms, 3, modelResult{true, 1, 900 * ms, 0}},
		{200 * ms, 5, modelResult{false, 1, 800 * ms, 800 * ms}},  // 4 units must leave: the first entry holds 6
		{200 * ms, 8, modelResult{false, 1, 800 * ms, 900 * ms}},  // 7 units: the second entry holds the 7th to 9th
		{1000 * ms, 8, modelResult{false, 7, 100 * ms, 100 * ms}}, // the first entry has left
		{1000 * ms, 7, modelResult{true, 0, 100 * ms, 0}},
		{1100 * ms, 10, modelResult{false, 3, 900 * ms, 900 * ms}},
		{2000 * ms, 10, modelResult{true, 0, w, 0}},
	})
	// The largest limit (lua.MaxLogLimit) with costs to match.
	const top = 100_000
	runModelTable(t, newSlidingLogModel(w, top), modelTableBase, []modelStep{
		{0, top - 1, modelResult{true, 1, w, 0}},
		{ms, 2, modelResult{false, 1, w - ms, w - ms}},
		{ms, 1, modelResult{true, 0, w - ms, 0}},
		{w, top, modelResult{false, top - 1, ms, ms}},
		{w + ms, top, modelResult{true, 0, w, 0}},
	})
	// Off the millisecond: an admission is recorded at its time rounded up
	// to the millisecond, never before the newest entry, and leaves the
	// window a window after that.
	runModelTable(t, newSlidingLogModel(w, 2), modelTableBase, []modelStep{
		{1, 1, modelResult{true, 1, w + 999, 0}},             // recorded at 1 ms
		{500, 1, modelResult{true, 0, w + 500, 0}},           // at 1 ms too
		{w, 1, modelResult{false, 0, ms, ms}},                // both still in the window
		{w + 999, 1, modelResult{false, 0, 1, 1}},            // 1 µs before they leave
		{w + ms, 1, modelResult{true, 1, w, 0}},              // both left; recorded at w + 1 ms
		{w + ms + 1, 1, modelResult{true, 0, w - 1, 0}},      // recorded at w + 2 ms
		{w + 2*ms, 1, modelResult{false, 0, w - ms, w - ms}}, // the first leaves at 2w + 1 ms
		{2*w + ms, 2, modelResult{false, 1, ms, ms}},         // it has left; the second in 1 ms
		{2*w + 2*ms, 2, modelResult{true, 0, w, 0}},          // both left
	})
	// The ideal log, to the microsecond, that the sliding counter is
	// measured against.
	runModelTable(t, idealLogModel(w, 2), modelTableBase, []modelStep{
		{1, 1, modelResult{true, 1, w, 0}},
		{500, 1, modelResult{true, 0, w - 499, 0}},
		{w, 1, modelResult{false, 0, 1, 1}},
		{w + 1, 1, modelResult{true, 0, 499, 0}},
		{w + 500, 2, modelResult{false, 1, w - 499, w - 499}},
	})
}

func TestModelFixedWindowTable(t *testing.T) {
	t.Parallel()
	const ms = 1000
	const w = 250 * ms
	runModelTable(t, newFixedWindowModel(w, 3), modelTableBase, []modelStep{
		{10 * ms, 2, modelResult{true, 1, 240 * ms, 0}},
		{20 * ms, 2, modelResult{false, 1, 230 * ms, 230 * ms}},
		{249*ms + 999, 1, modelResult{true, 0, 1, 0}},
		{250 * ms, 3, modelResult{true, 0, w, 0}}, // a new window
		{499*ms + 999, 1, modelResult{false, 0, 1, 1}},
		{1000 * ms, 3, modelResult{true, 0, w, 0}}, // windows skipped: still from 0
	})
}

func TestModelSlidingCounterTable(t *testing.T) {
	t.Parallel()
	const ms = 1000
	const w = 300 * ms // 3 sub-windows of 100 ms
	runModelTable(t, newSlidingCounterModel(w, 4, 3), modelTableBase, []modelStep{
		{50 * ms, 1, modelResult{true, 3, 250 * ms, 0}},         // sub 0 leaves at 300 ms
		{150 * ms, 2, modelResult{true, 1, 150 * ms, 0}},        // subs 0, 1
		{250 * ms, 2, modelResult{false, 1, 50 * ms, 50 * ms}},  // one unit must leave: sub 0 at 300 ms
		{250 * ms, 4, modelResult{false, 1, 50 * ms, 150 * ms}}, // all three: sub 1 at 400 ms
		{300 * ms, 1, modelResult{true, 1, 100 * ms, 0}},        // sub 0 gone; subs 1, 3
		{399*ms + 999, 2, modelResult{false, 1, 1, 1}},
		{400 * ms, 1, modelResult{true, 2, 200 * ms, 0}}, // sub 1 gone; sub 3 leaves at 600 ms
		{1000 * ms, 4, modelResult{true, 0, 300 * ms, 0}},
		{1050 * ms, 1, modelResult{false, 0, 250 * ms, 250 * ms}},
	})
	// A limit of one: every sub-window that admitted leaves the count whole.
	runModelTable(t, newSlidingCounterModel(w, 1, 3), modelTableBase, []modelStep{
		{10 * ms, 1, modelResult{true, 0, 290 * ms, 0}},
		{20 * ms, 1, modelResult{false, 0, 280 * ms, 280 * ms}},
	})
}

func TestModelTokenBucketTable(t *testing.T) {
	t.Parallel()
	const ms = 1000
	// 10 tokens per second, a bucket of 3: a token every 100 ms.
	runModelTable(t, newTokenBucketModel(1000*ms, 10, 3), modelTableBase, []modelStep{
		{0, 1, modelResult{true, 2, 100 * ms, 0}},
		{0, 1, modelResult{true, 1, 100 * ms, 0}},
		{0, 1, modelResult{true, 0, 100 * ms, 0}},
		{0, 1, modelResult{false, 0, 100 * ms, 100 * ms}},
		{50 * ms, 1, modelResult{false, 0, 50 * ms, 50 * ms}},
		{50 * ms, 3, modelResult{false, 0, 50 * ms, 250 * ms}},
		{100 * ms, 1, modelResult{true, 0, 100 * ms, 0}}, // exactly conforming
		{1000 * ms, 3, modelResult{true, 0, 100 * ms, 0}},
		{1150 * ms, 1, modelResult{true, 0, 50 * ms, 0}}, // 1.5 tokens back, 1 taken
		{1250 * ms, 1, modelResult{true, 0, 50 * ms, 0}},
	})
	// A refill time of 250 µs exactly representable: a burst larger than the
	// limit.
	runModelTable(t, newTokenBucketModel(1000, 4, 8), modelTableBase, []modelStep{
		{0, 8, modelResult{true, 0, 250, 0}},
		{0, 1, modelResult{false, 0, 250, 250}},
		{1000, 4, modelResult{true, 0, 250, 0}},
		{1100, 1, modelResult{false, 0, 150, 150}},
		{3000, 1, modelResult{true, 7, 250, 0}},
	})
}

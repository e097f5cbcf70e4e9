package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/lua"
)

// beatPeriod is how often an instance shares what it saw and reads the
// fleet's: one Redis call each time, whether anything happened or not.
// It is also the length of a bucket of the charts.
const beatPeriod = 5 * time.Second

// span is how far back the console shows, and buckets how many beats
// that is.
const (
	span    = 15 * time.Minute
	buckets = int64(span / beatPeriod)
)

// The console's keys, all in one Redis Cluster slot.
const (
	keyTraffic = "{ginlimit:console}:traffic:" // + bucket
	keyRefused = "{ginlimit:console}:refused:" // + bucket
	keyBans    = "{ginlimit:console}:bans"
	keyRoutes  = "{ginlimit:console}:routes"
)

// maxRoutes bounds the (rule, route) pairs an instance shares and the
// fleet keeps: they come from the compiled rules and the application's
// routes, never from a request's text, so only a bug could reach it.
const maxRoutes = 4096

// beatScript is console_beat.lua.
var beatScript = redis.NewScript(lua.ConsoleBeat())

// fleet shares what this instance saw with the other instances, on one
// Redis call a beat, and keeps what they all shared, as this one last read
// it: each rule's traffic, refused identities, bans, and the routes the
// rules served. It is safe for concurrent use.
type fleet struct {
	rdb       redis.UniversalClient
	limiter   *ginlimit.Limiter
	appRoutes func() gin.RoutesInfo // Config.Routes; nil for none
	tap       *Observer
	beating   sync.Mutex // held by the one beat under way

	mu      sync.Mutex        // guards what follows
	buckets map[int64]*bucket // by Unix time / beatPeriod
	bans    map[member]int64  // the ban's end, Unix ms
	routes  []served          // the rules' routes that some instance served
	loaded  bool              // the whole span has been read once
	last    int64             // the bucket of the last beat Redis answered
	beats   int64             // beats Redis answered, for tests
}

// bucket is the fleet's counts of one beat's 5 seconds.
type bucket struct {
	traffic map[series]int64
	refused map[member]int64
}

// reread is how many of the latest buckets each beat reads again: the
// other instances add to a bucket until their own beat in it.
const reread = 3

// beat shares what this instance saw since its last beat and reads back
// the fleet's, in one Redis call.
func (f *fleet) beat(ctx context.Context) error {
	f.beating.Lock()
	defer f.beating.Unlock()
	now := time.Now()
	b := now.Unix() / int64(beatPeriod/time.Second)
	traffic, refused, bans := f.tap.take()
	// Read again the buckets since a little before the last beat Redis
	// answered, so that a beat or several that failed leave no gap; the
	// whole span the first time.
	from := b - buckets + 1
	f.mu.Lock()
	if f.loaded {
		from = max(from, min(b, f.last)-reread+1)
	}
	f.mu.Unlock()
	keys, args := beatCall(b, from, now, traffic, refused, bans, f.served())
	reply, err := beatScript.Run(ctx, f.rdb, keys, args...).Slice()
	if err != nil {
		f.tap.giveBack(traffic, refused, bans)
		return fmt.Errorf("console beat: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tap.shared() // in Redis now: in the fleet's copy below, or, if the reply is bad, at the next beat
	read, banned, routes, err := parseBeat(reply, from)
	if err != nil {
		return fmt.Errorf("console beat: %w", err)
	}
	if f.buckets == nil {
		f.buckets = map[int64]*bucket{}
	}
	for i, bk := range read {
		f.buckets[i] = bk
	}
	for i := range f.buckets {
		if i <= b-buckets {
			delete(f.buckets, i)
		}
	}
	f.bans, f.routes, f.loaded, f.last = banned, routes, true, b
	f.beats++
	return nil
}

// beatCall is the keys and arguments of one beat in bucket b that reads
// the buckets from from to b.
func beatCall(b, from int64, now time.Time, traffic map[series]int64, refused map[ruleKey]*topK, bans map[member]int64, routes []served) ([]string, []any) {
	keys := []string{keyTraffic + strconv.FormatInt(b, 10), keyRefused + strconv.FormatInt(b, 10), keyBans, keyRoutes}
	for i := from; i <= b; i++ {
		keys = append(keys, keyTraffic+strconv.FormatInt(i, 10), keyRefused+strconv.FormatInt(i, 10))
	}
	var pairs []any
	for s, n := range traffic {
		pairs = append(pairs, s.route+"\n"+s.rule+"\n"+s.outcome, n)
	}
	nr := 0
	for k, t := range refused {
		for _, it := range t.items() {
			pairs = append(pairs, k.route+"\n"+k.rule+"\n"+it.id, it.count)
			nr++
		}
	}
	for m, end := range bans {
		pairs = append(pairs, m.route+"\n"+m.rule+"\n"+m.id, end)
	}
	routes = routes[:min(len(routes), maxRoutes)]
	for _, r := range routes {
		pairs = append(pairs, r.String())
	}
	ttl := int64((span + 2*beatPeriod) / time.Second)
	args := append([]any{ttl, topKShared, now.UnixMilli(), len(traffic), nr, len(bans), len(routes), maxRoutes}, pairs...)
	return keys, args
}

var errReply = errors.New("unexpected reply")

// parseBeat reads the script's reply: the bans, the routes served, then
// the buckets from from on.
func parseBeat(reply []any, from int64) (map[int64]*bucket, map[member]int64, []served, error) {
	if len(reply) < 2 || len(reply)%2 != 0 {
		return nil, nil, nil, errReply
	}
	bans := map[member]int64{}
	if err := pairsOf(reply[0], func(m string, n int64) {
		if k, ok := parseMember(m); ok {
			bans[k] = n
		}
	}); err != nil {
		return nil, nil, nil, err
	}
	routes, err := parseServed(reply[1])
	if err != nil {
		return nil, nil, nil, err
	}
	out := map[int64]*bucket{}
	for i := 2; i < len(reply); i += 2 {
		bk := &bucket{traffic: map[series]int64{}, refused: map[member]int64{}}
		if err := pairsOf(reply[i], func(f string, n int64) {
			if k, ok := parseMember(f); ok {
				bk.traffic[series{k.route, k.rule, k.id}] = n
			}
		}); err != nil {
			return nil, nil, nil, err
		}
		if err := pairsOf(reply[i+1], func(m string, n int64) {
			if k, ok := parseMember(m); ok {
				bk.refused[k] = n
			}
		}); err != nil {
			return nil, nil, nil, err
		}
		out[from+int64(i-2)/2] = bk
	}
	return out, bans, routes, nil
}

// pairsOf calls f with each name and number of a flat reply
// [name, number, ...]; numbers may come as integers or decimal text.
func pairsOf(v any, f func(string, int64)) error {
	list, ok := v.([]any)
	if !ok || len(list)%2 != 0 {
		return errReply
	}
	for i := 0; i < len(list); i += 2 {
		name, ok := list[i].(string)
		if !ok {
			return errReply
		}
		var n int64
		switch x := list[i+1].(type) {
		case int64:
			n = x
		case string:
			fl, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return errReply
			}
			n = int64(fl)
		default:
			return errReply
		}
		f(name, n)
	}
	return nil
}

// parseMember splits "<route>\n<rule>\n<third>".
func parseMember(s string) (member, bool) {
	route, rest, ok := strings.Cut(s, "\n")
	rule, id, ok2 := strings.Cut(rest, "\n")
	if !ok || !ok2 {
		return member{}, false
	}
	return member{ruleKey{route, rule}, id}, true
}

// rate is one outcome's decisions per second in each bucket of the span,
// the oldest first.
type rate struct {
	Outcome string
	PerSec  []float64
	Total   int64
}

// trafficOf returns k's decisions per second by outcome over the span,
// with what this instance saw since its last beat in the latest bucket.
func (f *fleet) trafficOf(k ruleKey, now time.Time) []rate {
	b := now.Unix() / int64(beatPeriod/time.Second)
	f.mu.Lock() // before the tap's: see Observer.shared
	defer f.mu.Unlock()
	pending := f.tap.peekTraffic(k)
	byOutcome := map[string]*rate{}
	at := func(outcome string) *rate {
		r := byOutcome[outcome]
		if r == nil {
			r = &rate{Outcome: outcome, PerSec: make([]float64, buckets)}
			byOutcome[outcome] = r
		}
		return r
	}
	for i, bk := range f.buckets {
		pos := buckets - 1 - (b - i)
		if pos < 0 || pos >= buckets {
			continue
		}
		for s, n := range bk.traffic {
			if s.route == k.route && s.rule == k.rule {
				r := at(s.outcome)
				r.PerSec[pos] += float64(n) / beatPeriod.Seconds()
				r.Total += n
			}
		}
	}
	for outcome, n := range pending {
		r := at(outcome)
		r.PerSec[buckets-1] += float64(n) / beatPeriod.Seconds()
		r.Total += n
	}
	out := make([]rate, 0, len(byOutcome))
	for _, r := range byOutcome {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b rate) int { return cmp.Compare(a.Outcome, b.Outcome) })
	return out
}

// refusedOf returns k's most refused identities over the span, at most n,
// most refused first.
func (f *fleet) refusedOf(k ruleKey, n int) []counted {
	f.mu.Lock() // before the tap's: see Observer.shared
	sum := f.tap.peekRefused(k)
	for _, bk := range f.buckets {
		for m, cnt := range bk.refused {
			if m.ruleKey == k {
				sum[m.id] += cnt
			}
		}
	}
	f.mu.Unlock()
	out := make([]counted, 0, len(sum))
	for id, cnt := range sum {
		out = append(out, counted{id, cnt})
	}
	slices.SortFunc(out, func(a, b counted) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.id, b.id))
	})
	return out[:min(n, len(out))]
}

// banned is one ban and its time left.
type banned struct {
	ID   string
	Left time.Duration
}

// bansOf returns k's bans that have time left, the longest first.
func (f *fleet) bansOf(k ruleKey, now time.Time) []banned {
	f.mu.Lock() // before the tap's: see Observer.shared
	ends := f.tap.peekBans(k)
	for m, end := range f.bans {
		if m.ruleKey == k {
			ends[m.id] = max(ends[m.id], end)
		}
	}
	f.mu.Unlock()
	var out []banned
	for id, end := range ends {
		if left := time.UnixMilli(end).Sub(now); left > 0 {
			out = append(out, banned{id, left})
		}
	}
	slices.SortFunc(out, func(a, b banned) int { return cmp.Or(cmp.Compare(b.Left, a.Left), cmp.Compare(a.ID, b.ID)) })
	return out
}

// forgetBan drops a lifted ban from what this instance shows; the lift
// takes it out of Redis's list itself.
func (f *fleet) forgetBan(m member) {
	f.mu.Lock()
	delete(f.bans, m)
	f.mu.Unlock()
	f.tap.mu.Lock()
	delete(f.tap.bans, m)
	f.tap.mu.Unlock()
}

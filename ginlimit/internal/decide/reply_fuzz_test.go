package decide

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
)

// The reply parsers take what a script answered, which this process does
// not control (a proxy, a fake, another version of a script): a reply of
// the wrong length or with a firing index out of range must be an error,
// never a panic and never a decision; every other reply is a decision.

// replyInts decodes fuzz bytes into a reply's integers, as lua.Ints decodes
// a script's packed string; bytes beyond the last whole integer are
// dropped (FuzzInts covers that case).
func replyInts(t *testing.T, b []byte) []int64 {
	t.Helper()
	reply, err := lua.Ints(string(b[:len(b)/8*8]))
	if err != nil {
		t.Fatalf("lua.Ints of %d bytes: %v", len(b)/8*8, err)
	}
	return reply
}

// packReply packs integers as the scripts reply (8 bytes each, big-endian).
func packReply(ints ...int64) []byte {
	b := make([]byte, 0, 8*len(ints))
	for _, v := range ints {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// ratePolicies are the shapes of rate-rule calls a reply can answer: one
// rule, one rule with its ban (a penalty call before it), and Rules (named,
// so the decision lists every rule) with and without bans.
func ratePolicies(f *testing.F) []*Route {
	c := newMini(f)
	return []*Route{
		newRoute(f, c, false, 0, rate("rate_limit:", "", 5, false)),
		newRoute(f, c, false, 0, rate("rate_limit:", "", 5, true)),
		newRoute(f, c, true, 0, rate("rate_limit:", "only", 2, false)),
		newRoute(f, c, true, 0, rate("ka:", "a", 5, true), rate("kb:", "b", 7, false), rate("kc:", "c", 3, true)),
	}
}

// rateRequest is a request on every rule of p for Policy.Allow's key k, its
// calls filled as allow fills them.
func rateRequest(p *Route) *request {
	req := p.newRequest(rule.Scope{Route: "k"})
	for i, r := range p.Rules {
		req.setCall(i, r, nil, r.Cost)
	}
	return req
}

// checkReplyHead: replyHead accepts a reply exactly when it has 2 + per*n
// integers and a firing index from 0 to n.
func checkReplyHead(t *testing.T, reply []int64, n, per int) {
	t.Helper()
	now, fired, err := replyHead(reply, n, per)
	well := len(reply) == 2+per*n && reply[1] >= 0 && reply[1] <= int64(n)
	switch {
	case !well && err == nil:
		t.Fatalf("replyHead(%v, n=%d, per=%d) accepted a malformed reply: fired %d", reply, n, per, fired)
	case well && err != nil:
		t.Fatalf("replyHead(%v, n=%d, per=%d): %v", reply, n, per, err)
	case well && (!now.Equal(time.UnixMicro(reply[0])) || int64(fired) != reply[1]):
		t.Fatalf("replyHead(%v, n=%d, per=%d) = %v, %d", reply, n, per, now, fired)
	}
}

// inRange reports whether µs is a duration a script can reply: 0 to the
// longest window (or ban).
func inRange(us int64) bool { return us >= 0 && us <= lua.MaxWindow }

// FuzzDecisionReply: the decision scripts' reply {now_us, fired, then per
// call: ok, remaining, reset_us, retry_us}, parsed for one rule, a rule and
// its ban, and Rules. It is an error exactly when malformed (see
// replyHead); otherwise Allowed is fired == 0, the decision is the firing
// rule's, Remaining is never negative, and for a reply a script can give
// (ok 0 or 1 agreeing with fired, durations in range) an admitted request
// has no RetryAfter and no duration is negative.
func FuzzDecisionReply(f *testing.F) {
	ps := ratePolicies(f)
	now := t0.UnixMicro()
	// TestReplyLayout's shapes: admitted by one rule and by several.
	f.Add(uint8(0), packReply(now, 0, 1, 4, 1000000, 0))
	f.Add(uint8(2), packReply(now, 0, 1, 1, 1000000, 0))
	f.Add(uint8(1), packReply(now, 0, 1, 2, 60000000, 0, 1, 4, 1000000, 0))
	f.Add(uint8(3), packReply(now, 0, 1, 2, 60000000, 0, 1, 4, 1000000, 0, 1, 6, 1000000, 0, 1, 2, 60000000, 0, 1, 2, 1000000, 0))
	// Refusals: by the rule, by its ban (a banned identity), by a later
	// rule, with a remaining below 0 (a limit lowered on redeploy).
	f.Add(uint8(0), packReply(now, 1, 0, -3, 1000000, 400000))
	f.Add(uint8(1), packReply(now, 1, 0, 0, 60000000, 60000000, 0, 0, 1000000, 200000))
	f.Add(uint8(1), packReply(now, 2, 1, 0, 60000000, 0, 0, 0, 1000000, 200000))
	f.Add(uint8(3), packReply(now, 5, 1, 2, 60000000, 0, 1, 4, 1000000, 0, 1, 6, 1000000, 0, 1, 2, 60000000, 0, 0, 0, 1000000, 500000))
	// Malformed: empty, a header only, one integer short, one too many, a
	// firing index of -1 and of n+1.
	f.Add(uint8(0), packReply())
	f.Add(uint8(0), packReply(now, 0))
	f.Add(uint8(0), packReply(now, 0, 1, 4, 1000000))
	f.Add(uint8(0), packReply(now, 0, 1, 4, 1000000, 0, 0))
	f.Add(uint8(0), packReply(now, -1, 1, 4, 1000000, 0))
	f.Add(uint8(0), packReply(now, 2, 0, 4, 1000000, 0))
	f.Add(uint8(3), packReply(now, 7, 1, 2, 60000000, 0, 1, 4, 1000000, 0, 1, 6, 1000000, 0, 1, 2, 60000000, 0, 0, 0, 1000000, 500000))
	f.Fuzz(func(t *testing.T, sel uint8, raw []byte) {
		p := ps[int(sel)%len(ps)]
		req := rateRequest(p)
		reply := replyInts(t, raw)
		n := len(req.keys) // a record per rule, and one per Ban
		checkReplyHead(t, reply, n, 4)

		d, each, err := req.parse(reply, req.p.Named)
		if len(reply) != 2+4*n || reply[1] < 0 || reply[1] > int64(n) {
			if err == nil || !reflect.DeepEqual(d, Decision{}) || each != nil {
				t.Fatalf("%d calls, malformed reply %v: %+v, %v, %v; want only an error", n, reply, d, each, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d calls, reply %v: %v", n, reply, err)
		}
		checkDecision(t, p, req, reply, d, each)
	})
}

// checkDecision checks the decision parse made of a well-formed reply.
func checkDecision(t *testing.T, p *Route, req *request, reply []int64, d Decision, each []Decision) {
	t.Helper()
	n, fired := len(req.keys), int(reply[1])
	if d.Allowed != (fired == 0) || !d.Time.Equal(time.UnixMicro(reply[0])) || d.Remaining < 0 {
		t.Fatalf("reply %v: decision %+v (fired %d)", reply, d, fired)
	}
	if d.decider == nil || d.Rule != d.decider.Name || d.Limit != d.decider.Limit {
		t.Fatalf("reply %v: decision %+v names no rule of its own", reply, d)
	}
	// Each record's rule, and the call it belongs to: a Ban's record
	// belongs to its rule's call.
	owner, recRule := make([]*call, n), make([]*rule.Base, n)
	for i := range req.calls {
		cl, at := &req.calls[i], req.rec(i)
		owner[at], recRule[at] = cl, &cl.rule.Base
		if cl.ban != nil {
			owner[at-1], recRule[at-1] = cl, &cl.rule.Ban.Base
		}
	}
	if fired > 0 {
		if want := owner[fired-1].rule.Name; d.Rule != want {
			t.Fatalf("reply %v: the decision is rule %q's, want the firing rule %q's", reply, d.Rule, want)
		}
	}
	if n > 1 || p.Named {
		if len(each) != n {
			t.Fatalf("reply %v: %d decisions for %d calls", reply, len(each), n)
		}
		var retry time.Duration
		for i, e := range each {
			if e.Rule != recRule[i].Name || e.decider != recRule[i] || e.Remaining != int(max(reply[3+4*i], 0)) {
				t.Fatalf("reply %v: call %d's decision %+v", reply, i, e)
			}
			retry = max(retry, e.RetryAfter)
		}
		if d.RetryAfter != retry {
			t.Fatalf("reply %v: RetryAfter %v, want the longest of the calls' (%v)", reply, d.RetryAfter, retry)
		}
	}
	if p.Named {
		if len(d.Rules) != len(p.Rules) {
			t.Fatalf("reply %v: Rules %+v, want one per rule (%d)", reply, d.Rules, len(p.Rules))
		}
		for i, r := range p.Rules {
			if d.Rules[i].Rule != r.Name {
				t.Fatalf("reply %v: Rules[%d] is %q's, want %q's", reply, i, d.Rules[i].Rule, r.Name)
			}
		}
	} else if d.Rules != nil {
		t.Fatalf("reply %v: Rules %+v on a route without Rule", reply, d.Rules)
	}
	if !scriptCouldReply(reply, n) {
		return
	}
	if d.Reset < 0 || d.RetryAfter < 0 || d.Allowed && d.RetryAfter != 0 {
		t.Fatalf("reply %v: Reset %v, RetryAfter %v (allowed %v)", reply, d.Reset, d.RetryAfter, d.Allowed)
	}
}

// scriptCouldReply reports whether a well-formed reply is one the decision
// scripts can give: each ok is 0 or 1, the calls before the firing one
// admit and the firing one does not, durations are in range, and only a
// call that does not admit has a retry.
func scriptCouldReply(reply []int64, n int) bool {
	fired := int(reply[1])
	for i := range n {
		ok, reset, retry := reply[2+4*i], reply[4+4*i], reply[5+4*i]
		switch {
		case ok != 0 && ok != 1, !inRange(reset), !inRange(retry), ok == 1 && retry != 0:
			return false
		case (fired == 0 || i < fired-1) && ok != 1, i == fired-1 && ok != 0:
			return false
		}
	}
	return true
}

// slotPolicies are the shapes of in-flight calls: one rule, and Rules of
// two in-flight rules after a rate rule.
func slotPolicies(f *testing.F) []*Route {
	c := newMini(f)
	return []*Route{
		newRoute(f, c, false, 10_000, slots("rate_limit:", "", 3)),
		newRoute(f, c, true, 10_000, rate("rate_limit:", "rate", 9, false), slots("s1:", "s1", 3), slots("s2:", "s2", 5)),
	}
}

// FuzzSlotReply: the in-flight acquire's (and peek's) reply {now_us,
// fired, in_use per rule} is an error exactly when malformed; otherwise
// Allowed is fired == 0, a refusal is the firing rule's with Retry-After
// InFlightRetryAfter, an admission the rule with the fewest free slots, and
// Remaining is free slots: never negative, and at most the rule's n for
// counts of leases the script can reply. A renewal's reply {n} is read only
// when it is one integer.
func FuzzSlotReply(f *testing.F) {
	ps := slotPolicies(f)
	now := t0.UnixMicro()
	// inflight.lua's acquire replies: admitted, refused by a full key,
	// refused by the second rule, over-full (n lowered on redeploy).
	f.Add(uint8(0), packReply(now, 0, 1))
	f.Add(uint8(0), packReply(now, 1, 3))
	f.Add(uint8(1), packReply(now, 0, 2, 1))
	f.Add(uint8(1), packReply(now, 2, 1, 5))
	f.Add(uint8(0), packReply(now, 1, 7))
	// Malformed: short, long, firing index out of range either way.
	f.Add(uint8(0), packReply(now, 0))
	f.Add(uint8(1), packReply(now, 0, 1))
	f.Add(uint8(0), packReply(now, 0, 1, 1))
	f.Add(uint8(0), packReply(now, 2, 1))
	f.Add(uint8(1), packReply(now, -1, 1, 1))
	f.Add(uint8(0), packReply(1))
	f.Fuzz(func(t *testing.T, sel uint8, raw []byte) {
		p := ps[int(sel)%len(ps)]
		reply := replyInts(t, raw)
		n := len(p.Slots)
		checkReplyHead(t, reply, n, 1)

		if v, ok := one(reply); ok != (len(reply) == 1) || ok && v != reply[0] {
			t.Fatalf("one(%v) = %d, %v", reply, v, ok)
		}

		d, err := parseSlots(p.Slots, reply)
		if len(reply) != 2+n || reply[1] < 0 || reply[1] > int64(n) {
			if err == nil || !reflect.DeepEqual(d, Decision{}) {
				t.Fatalf("%d rules, malformed reply %v: %+v, %v; want only an error", n, reply, d, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d rules, reply %v: %v", n, reply, err)
		}
		checkSlotDecision(t, p.Slots, reply, d)
	})
}

// checkSlotDecision checks the decision parseSlots made of a well-formed
// reply.
func checkSlotDecision(t *testing.T, rules []*rule.InFlight, reply []int64, d Decision) {
	t.Helper()
	n, fired := len(rules), int(reply[1])
	if d.Allowed != (fired == 0) || !d.Time.Equal(time.UnixMicro(reply[0])) {
		t.Fatalf("reply %v: decision %+v", reply, d)
	}
	if d.Remaining < 0 || d.decider == nil || d.Limit != d.decider.Limit || d.Rule != d.decider.Name {
		t.Fatalf("reply %v: decision %+v: Remaining must be free slots of its rule, never negative", reply, d)
	}
	// in_use is a count of leases, which the script never replies
	// negative; of such a count, at most n slots are free.
	counts := true
	for _, v := range reply[2:] {
		counts = counts && v >= 0
	}
	if counts && d.Remaining > d.Limit {
		t.Fatalf("reply %v: %d slots free of %d", reply, d.Remaining, d.Limit)
	}
	free := func(i int) int { return max(rules[i].Limit-int(reply[2+i]), 0) }
	if fired > 0 {
		r := rules[fired-1]
		if d.Rule != r.Name || d.Remaining != free(fired-1) || d.RetryAfter != InFlightRetryAfter || d.Reset != InFlightRetryAfter {
			t.Fatalf("reply %v: refusal %+v, want rule %q's with %d free and Retry-After %v", reply, d, r.Name, free(fired-1), InFlightRetryAfter)
		}
	} else {
		least := free(0)
		for i := range n {
			least = min(least, free(i))
		}
		if d.Remaining != least || d.RetryAfter != 0 || d.Reset != 0 {
			t.Fatalf("reply %v: admission %+v, want the fewest free slots (%d) and no Retry-After", reply, d, least)
		}
	}
	if n > 1 && len(d.Rules) != n || n == 1 && d.Rules != nil {
		t.Fatalf("reply %v: Rules %+v for %d rules", reply, d.Rules, n)
	}
}

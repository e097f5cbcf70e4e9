package state

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// takeAll takes one unit at a time from key's bucket at now until it
// refuses, and returns how many it took (at most limit).
func takeAll(l *Buckets, key string, now time.Time, limit int) int {
	n := 0
	for n < limit {
		if _, _, ok := l.Take(key, now, 1); !ok {
			break
		}
		n++
	}
	return n
}

// TestBucketsContinueFromRedis: a key Redis answered for continues from
// that answer's remaining, less what the fallback admitted in the window
// before; a key never seen holds the share; an older answer changes
// nothing.
func TestBucketsContinueFromRedis(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := NewBuckets(50, NewInstances(1), time.Hour, 1000)
	l.Learn("partly", Answer{Remaining: 20, Reset: time.Hour, At: t0}, now)
	if n := takeAll(l, "partly", now, 100); n != 20 {
		t.Fatalf("after Redis reported 20 left: %d admitted", n)
	}
	if n := takeAll(l, "unseen", now, 100); n != 50 {
		t.Fatalf("a key never seen: %d admitted, want the share (50)", n)
	}
	l.Learn("partly", Answer{Remaining: 40, Reset: time.Hour, At: t0.Add(-time.Second)}, now)
	if n := takeAll(l, "partly", now, 100); n != 0 {
		t.Fatalf("an older answer refilled the bucket: %d admitted", n)
	}
	// What the fallback admitted is charged to Redis's next answer.
	l2 := NewBuckets(50, NewInstances(1), time.Hour, 1000)
	l2.Learn("k", Answer{Remaining: 30, Reset: time.Hour, At: t0}, now)
	if n := takeAll(l2, "k", now, 5); n != 5 {
		t.Fatalf("took %d of 5", n)
	}
	l2.Learn("k", Answer{Remaining: 30, Reset: time.Hour, At: t0.Add(time.Millisecond)}, now)
	if n := takeAll(l2, "k", now, 100); n != 25 {
		t.Fatalf("after 5 admitted in process and Redis's 30: %d admitted, want 25", n)
	}
}

// TestBucketsGiveAndForget: Give returns what Take took, and Forget makes
// the bucket full again.
func TestBucketsGiveAndForget(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := NewBuckets(10, NewInstances(2), time.Hour, 1000) // share 5
	if _, _, ok := l.Take("k", now, 5); !ok {
		t.Fatal("the share of 5 does not hold 5")
	}
	if left, retry, ok := l.Take("k", now, 1); ok || left != 0 || retry <= 0 {
		t.Fatalf("an empty bucket: left %d, retry %v, ok %v", left, retry, ok)
	}
	l.Give("k", 2)
	if n := takeAll(l, "k", now, 10); n != 2 {
		t.Fatalf("after giving 2 back: %d admitted", n)
	}
	l.Forget("k")
	if n := takeAll(l, "k", now, 10); n != 5 {
		t.Fatalf("after Forget: %d admitted, want 5", n)
	}
	if _, _, ok := l.Take("k2", now, 6); ok {
		t.Fatal("a cost over the share was admitted")
	}
	if d := l.UnitRefill(); d != time.Hour/5 {
		t.Fatalf("UnitRefill %v, want %v", d, time.Hour/5)
	}
}

// TestBansHoldUntilTheirEnd: a ban Redis reported holds until its reset,
// and not after.
func TestBansHoldUntilTheirEnd(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := NewBans(1000)
	l.Learn("k", Answer{Remaining: 0, Reset: time.Minute, At: t0}, now)
	if left := l.Banned("k", now.Add(time.Second)); left != time.Minute-time.Second {
		t.Fatalf("a second into a minute's ban: %v left", left)
	}
	if left := l.Banned("k", now.Add(time.Minute)); left != 0 {
		t.Fatalf("at the ban's end: %v left", left)
	}
	if left := l.Banned("other", now); left != 0 {
		t.Fatalf("a key never banned: %v left", left)
	}
}

// TestBucketsBounded: however many keys Redis answers for, the fallback
// holds about the keys it was made with.
func TestBucketsBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := NewBuckets(50, NewInstances(1), time.Hour, 64)
	for i := range 10_000 {
		l.Learn("k"+strconv.Itoa(i), Answer{Remaining: 0, Reset: time.Hour, At: t0}, now)
		if n := l.keys.Len(); n > 64 {
			t.Fatalf("after %d keys the fallback holds %d, want at most 64", i+1, n)
		}
	}
}

// TestBucketsFollowTheCount: a share is limit/n for the count of
// instances at each use; an answer gives this instance its n-th of the
// remaining; a bucket holds no more than the share of a count that grew;
// an in-flight cap follows the count too.
func TestBucketsFollowTheCount(t *testing.T) {
	t.Parallel()
	now := time.Now()
	n := NewInstances(2)
	l := NewBuckets(12, n, time.Hour, 1000)
	if got := takeAll(l, "a", now, 100); got != 6 {
		t.Fatalf("2 instances, limit 12: %d admitted, want 6", got)
	}
	l.Learn("b", Answer{Remaining: 10, Reset: time.Hour, At: t0}, now)
	l.Learn("c", Answer{Remaining: 10, Reset: time.Hour, At: t0}, now)
	if got := takeAll(l, "b", now, 100); got != 5 {
		t.Fatalf("Redis said 10 left, 2 instances: %d admitted, want 5 (10/2)", got)
	}
	n.Store(4)
	if got := takeAll(l, "c", now, 100); got != 3 {
		t.Fatalf("5 left, then the count grew to 4: %d admitted, want the new share, 3", got)
	}
	l.Learn("e", Answer{Remaining: 8, Reset: time.Hour, At: t0}, now)
	if got := takeAll(l, "e", now, 100); got != 2 {
		t.Fatalf("Redis said 8 left, 4 instances: %d admitted, want 2 (8/4)", got)
	}
	if got := takeAll(l, "d", now, 100); got != 3 {
		t.Fatalf("4 instances, limit 12: %d admitted, want 3", got)
	}
	if d := l.UnitRefill(); d != time.Hour/3 {
		t.Fatalf("UnitRefill %v, want %v", d, time.Hour/3)
	}
	s := NewSlots(4, n)
	if _, ok := s.Take("k"); !ok {
		t.Fatal("4 slots over 4 instances: the first refused")
	}
	if _, ok := s.Take("k"); ok {
		t.Fatal("4 slots over 4 instances: a second admitted")
	}
}

// TestBucketsFractionalShare: a share is never rounded up: Limit(1) on 4
// instances is a quarter of a request, which admits nothing in any window
// (one per instance would be 4 in a window across the fleet); Limit(10) on
// 4 refills 2.5 per window, not 2 or 3.
func TestBucketsFractionalShare(t *testing.T) {
	t.Parallel()
	l := NewBuckets(1, NewInstances(4), time.Hour, 1000)
	now := time.Now() // after the buckets' base: whole windows from it refill whole units
	var got []int
	for w := range 8 {
		got = append(got, takeAll(l, "k", now.Add(time.Duration(w)*time.Hour), 10))
	}
	if want := []int{0, 0, 0, 0, 0, 0, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("Limit(1) on 4 instances, per window: %v, want %v", got, want)
	}
	l = NewBuckets(10, NewInstances(4), time.Hour, 1000)
	now = time.Now()
	total := 0
	for step := range 40 { // a steady flood, every tenth of a window
		total += takeAll(l, "k", now.Add(time.Duration(step)*time.Hour/10), 100)
	}
	if total != 12 {
		t.Fatalf("Limit(10) on 4 instances: %d admitted in 3.9 windows, want 12 (2.5, and 2.5 a window)", total)
	}
}

// TestInstancesHeard: a heartbeat's count has not heard from Redis until
// it stores a count, and a fixed count on it waits for the same answer; a
// count without a heartbeat has heard from the start.
func TestInstancesHeard(t *testing.T) {
	t.Parallel()
	beat := NewHeartbeatCount()
	fixed := beat.Fixed(3)
	if beat.Heard() || fixed.Heard() || beat.Load() != 1 || fixed.Load() != 3 {
		t.Fatalf("before a beat: heard %v and %v, counts %d and %d; want not heard, 1 and 3",
			beat.Heard(), fixed.Heard(), beat.Load(), fixed.Load())
	}
	beat.Store(5)
	if !beat.Heard() || !fixed.Heard() || beat.Load() != 5 || fixed.Load() != 3 {
		t.Fatalf("after a beat: heard %v and %v, counts %d and %d; want heard, 5 and 3",
			beat.Heard(), fixed.Heard(), beat.Load(), fixed.Load())
	}
	var none *Instances
	if !NewInstances(2).Heard() || !none.Heard() {
		t.Fatal("a count without a heartbeat has not heard")
	}
}

package state

import "testing"

// TestSlotsCountHeldAndTaken: the slots Redis granted (Hold) count against
// the cap as the ones the fallback gives (Take); a key is kept only while
// a slot of it is held.
func TestSlotsCountHeldAndTaken(t *testing.T) {
	t.Parallel()
	l := NewSlots(2, nil)
	l.Hold("k")
	if left, ok := l.Take("k"); !ok || left != 0 {
		t.Fatalf("one held of 2: Take %d, %v; want the last slot", left, ok)
	}
	if _, ok := l.Take("k"); ok {
		t.Fatal("a third slot of 2 was taken")
	}
	l.Hold("k") // Redis granted it: counted over the cap
	l.Give("k")
	if _, ok := l.Take("k"); ok {
		t.Fatal("a slot was taken while 2 were still held")
	}
	l.Give("k")
	if left, ok := l.Take("k"); !ok || left != 0 {
		t.Fatalf("after two given back: Take %d, %v", left, ok)
	}
	for range 2 {
		l.Give("k")
	}
	if n := l.keys.Len(); n != 0 {
		t.Fatalf("no slot held, yet %d keys kept", n)
	}
}

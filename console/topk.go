package console

import (
	"cmp"
	"slices"
)

// topK is a Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005):
// the identities refused most, in at most k counters. An identity not
// counted takes the place of the least counted one and inherits its count
// (its error), so every identity refused more than n/k times of n is kept,
// and no count is under its truth. k is small, so a linear scan for the
// least beats a heap.
type topK struct {
	k     int
	index map[string]int // identity -> position in list
	list  []counted
}

// counted is one identity and its count.
type counted struct {
	id    string
	count int64
}

// topKPerBeat is how many identities each rule keeps between two beats,
// and topKShared how many the fleet keeps per 5-second bucket in Redis.
const (
	topKPerBeat = 64
	topKShared  = 256
)

func newTopK(k int) *topK { return &topK{k: k, index: make(map[string]int, k)} }

// add counts n refusals of id.
func (t *topK) add(id string, n int64) {
	if i, ok := t.index[id]; ok {
		t.list[i].count += n
		return
	}
	if len(t.list) < t.k {
		t.index[id] = len(t.list)
		t.list = append(t.list, counted{id, n})
		return
	}
	least := 0
	for i := range t.list {
		if t.list[i].count < t.list[least].count {
			least = i
		}
	}
	delete(t.index, t.list[least].id)
	t.index[id] = least
	t.list[least] = counted{id, t.list[least].count + n}
}

// items returns the identities, most counted first.
func (t *topK) items() []counted {
	out := slices.Clone(t.list)
	slices.SortFunc(out, func(a, b counted) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.id, b.id))
	})
	return out
}

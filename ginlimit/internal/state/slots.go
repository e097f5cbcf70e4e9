package state

// Slots is an in-flight rule's in-process count of slots per key, its
// fallback while Redis cannot decide: at most n per key in this process,
// counting the slots this process holds in Redis (Hold) with those the
// fallback gave (Take). A key is kept only while a slot of it is held, so
// it needs no bound of its own: it holds at most as many keys as requests
// are in flight. It is safe for concurrent use.
type Slots struct {
	n    int
	keys *Shards[int]
}

// NewSlots returns a count of at most n slots per key.
func NewSlots(n int) *Slots {
	return &Slots{n: n, keys: NewShards[int](0)}
}

// Hold counts a slot of key that Redis granted: it takes one whether or
// not the cap has room, so that Take sees it.
func (l *Slots) Hold(key string) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	held, _ := s.Get(key)
	s.Put(key, held+1)
}

// Take takes a slot of key if one is free, and returns how many are left.
func (l *Slots) Take(key string) (int, bool) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	held, _ := s.Get(key)
	if held >= l.n {
		return 0, false
	}
	s.Put(key, held+1)
	return l.n - held - 1, true
}

// Give gives back a slot of key.
func (l *Slots) Give(key string) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if held, _ := s.Get(key); held > 1 {
		s.Put(key, held-1)
	} else {
		s.Delete(key)
	}
}

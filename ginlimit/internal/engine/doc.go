// Package engine makes one bounded script call on the right Redis node,
// behind that node's circuit breaker. It knows go-redis and nothing about
// HTTP, rules or keys beyond "keys[0] picks the node": package ginlimit
// builds the scripts and their arguments, and reads the replies.
//
// An [Engine] serves one client (a *redis.Client, *redis.ClusterClient,
// *redis.Ring, or any redis.Scripter) with the settings of a [Config]; the
// routes on that client share it. [Engine.Run] is the whole job; every
// piece below exists to keep one promise: a call answers within its time
// bounds, and an error says whether Redis failed or this process did.
//
// # Files, by what a decision's call does
//
// A decision's call, followed by its keys, passes through two files in the
// order it runs:
//
//   - call.go: the call's admission and verdict. [Engine.Run] and
//     [Engine.Aside] find the node that serves keys[0] (forKey), ask its
//     [Breaker], take one of its slots (nodes.go), and afterwards judge how
//     the call ended (settle, judge).
//   - wire.go: the call on its node's wire (transport). Bounded in time
//     (callContext, bounded), directly or through the auto-pipeliner
//     (send), failing fast when the server is gone (call), its EVALSHA and
//     reply in one allocation (wire).
//
// Beside them, off a decision's path: engine.go (New, Close, loading the
// scripts), nodes.go (the nodes of a client and their slots), reach.go
// (dialing a server that failed, and the PING verdict), lease.go (the
// aside lane's own pools), outage.go (telling a [Watcher]), inspect.go
// (what tests and observers read). A request's walk (farm-studio walk
// ginlimit/pipeline.go:Policy.serve:c) enters call.go, then wire.go, and
// comes back to call.go once, for [Breaker.State] from package ginlimit:
// 2 engine files, 3 stays.
//
// # Nodes and breakers
//
// A node is one Redis server: the plain client's, each cluster master, each
// Ring shard. Each has its own [Breaker], so a dead master fails fast only
// for the keys it owns, and another's answers say nothing about it. Only a
// Redis failure counts (a network error, no answer in time, LOADING,
// BUSY...); a reply error on one key does not open the breaker for the
// others.
//
// # Slots
//
// A node has as many slots as the client's pool has connections, and a
// call holds one while it is on the wire, so go-redis never makes it wait
// for a connection: a wait for a slot is time spent in this process,
// bounded by the caller's queue time and by how many calls may wait, and
// running out of either is [ErrSaturated], never a Redis failure. Lease
// renewals and releases, and heartbeats, have slots, a connection pool
// and a breaker of their own on each server ([Engine.Aside], lease.go),
// so a flood of decisions cannot make a held lease, or an instance's
// presence, lapse.
//
// # The pipeliner
//
// With [Config.AutoPipeline] on a plain client, calls that find others
// already waiting go through go-redis's full-duplex auto-pipeliner, made on
// a clone of the application's client so that its options and its Close
// stay the engine's. A lone call goes directly: it gains nothing from a
// batch.
//
// # Time bounds
//
// Once it has a slot, a call gets its timeout on the wire. Calls that start
// within a small step share one deadline, so a call pays for no timer of
// its own. A client that does not bound socket reads by the context is
// called through a clone that does (a plain client), or in a goroutine
// abandoned at the deadline (a cluster or Ring); the engine never retries
// inside go-redis, and fails fast once a node's server refuses connections.
//
// # A call's memory
//
// The engine builds a call's EVALSHA itself rather than through
// Script.Run: its context, arguments and reply's integers share one
// allocation, each script's SHA1 is boxed once, and a script that replies
// a string (the decision scripts pack their integers in one) is read as a
// string, with no boxing (see wire.go).
//
// # The PING verdict
//
// A call that runs out of its timeout while Redis answered nothing else of
// the node may still be this process's fault: a process starved of CPU
// reads every reply late. The node then asks its server for a PING: an
// answer makes the call [ErrSaturated] (a late read), silence makes it a
// Redis failure that the breaker counts.
//
// [ErrCircuitOpen] is a call not sent because the breaker is open;
// [ErrClientGone] is the request's own context ending first, which, like
// saturation, is no verdict on Redis ([NoVerdict]).
package engine

// Package fleet keeps the instances of an application that share a Redis
// in step: how many they are, the overrides they apply, and the resets
// they honour.
//
// One [Fleet] per Limiter and Redis client runs one upkeep loop, and one
// subscription (the reset hub, hub.go) on one channel, ResetChannel. What
// changes is pushed on the channel as it happens: a reset ("reset", with
// acknowledgements), a change of the overrides ("limits <version>", after
// SetLimit writes) and an instance that joins ("join <count>", from its
// first beat). A notice can be missed (a subscription that broke, a
// publish that failed after its write, a cluster link down), so the loop
// makes one call per Tick as the safety net, in turn: the heartbeat
// (beat.lua) and the overrides' version (limits_version.lua); each echoes
// on the instance's own channel, which only its subscription hears, so
// that a subscription that still receives costs no PING. An idle instance
// makes one call per Tick (1.5 s), and a missed notice is caught within
// HeartbeatPeriod (an instance joining) or OverridePoll (an override); a
// missed reset within the route's MaxStaleness, the bound of everything a
// deny cache holds.
//
// Every call of the fleet goes on the engine's aside lane (Engine.Aside):
// bounded, behind its own breaker, never behind a flood of decisions.
package fleet

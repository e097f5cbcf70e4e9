// Package rule compiles a route's rule options into rules and their Redis
// keys; it is pure (no I/O, no Redis), so its tests need no server.
package rule

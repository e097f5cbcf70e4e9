package engine

import (
	"context"
	"errors"
	"fmt"
)

// The errors of a call that Redis did not answer. Package ginlimit gives
// them to its users under the same names, documented there; their text is
// what a user reads, so it names ginlimit.
var (
	// ErrSaturated: this process could not get the call to a healthy Redis
	// in time (no slot, a late read, a full pool of the application's
	// commands). It is no verdict on Redis.
	ErrSaturated = errors.New("ginlimit: no decision in time: the process is saturated (Redis is not failing)")
	// ErrCircuitOpen: the node's breaker is open, and the call was not sent.
	ErrCircuitOpen = errors.New("ginlimit: circuit breaker open: Redis is failing")
	// ErrClientGone: the request's own context ended before Redis answered.
	// It is no verdict on Redis.
	ErrClientGone = errors.New("ginlimit: no decision: the request's context ended before Redis answered")
)

// ErrQueueTimedOut is wrapped, under ErrSaturated, by the error of a call
// whose wait for one of its node's slots ran out of its queue time.
var ErrQueueTimedOut = fmt.Errorf("no Redis connection free within the QueueTimeout: %w", context.DeadlineExceeded)

package ginlimit

import "github.com/ginlimit/ginlimit/ginlimit/internal/engine"

// ErrSaturated is wrapped by the error of a decision that this process could
// not send to Redis in time, although Redis is not failing: every
// connection was busy and too many decisions were already waiting, or its
// call waited on the wire past the Timeout behind this process's other
// calls while Redis answered those in time, or this process read Redis's
// reply late. It never opens the circuit breaker. It is refused under every
// [FailPolicy]: only Redis grants while Redis is healthy, because time
// spent waiting in this process is no evidence that the limit has room
// (its call may even have run and been counted in Redis). A gin route
// answers it 503, as [FailClosed] answers a Redis failure, and observers
// see [OutcomeSaturated]. A saturated process sheds that request's work
// instead of taking on more.
var ErrSaturated = engine.ErrSaturated

// ErrClientGone is wrapped by the error of a decision that was not taken
// because the request's own context ended first: the client hung up, or
// the server's deadline for the request passed. It is neither saturation
// nor a Redis failure: no fallback decides it, the breaker does not count
// it, and the request is never admitted. A gin route aborts it with status
// 499 (Client Closed Request, as nginx logs it), no body and no rate limit
// headers, and its handler does not run; [Policy.Allow] returns it with a
// refused decision. Nothing it carried is lost: the ban strikes it would
// have reported go back, to be reported with the key's next call. If its
// call had already reached Redis, Redis counted it, as for any request
// that Redis admitted.
var ErrClientGone = engine.ErrClientGone

// ErrCircuitOpen is wrapped by the error of a decision that was not sent to
// Redis because the backend's circuit breaker is open (see [DefaultBreakerFailures]).
var ErrCircuitOpen = engine.ErrCircuitOpen

package otelginlimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// The span event and its attribute keys (see the package documentation,
// Traces).
const (
	spanEvent     = "ginlimit.decision"
	keyRule       = attribute.Key("ginlimit.rule")
	keyOutcome    = attribute.Key("ginlimit.outcome")
	keyLimit      = attribute.Key("ginlimit.limit")
	keyRemaining  = attribute.Key("ginlimit.remaining")
	keyRetryAfter = attribute.Key("ginlimit.retry_after")
	keyReason     = attribute.Key("ginlimit.reason")
)

// Compile-time check that Trace is an observer.
var _ func(context.Context, ginlimit.Event) = Trace

// Trace adds an event named "ginlimit.decision" to the span of ctx, with
// the rule, the outcome and, for a decision, the limit, the quota
// remaining and, when set, the retry-after in seconds (see the package
// documentation for the attributes); never the identity or the key. Give
// it to ginlimit.Observe: ginlimit.Observe(otelginlimit.Trace). ginlimit
// calls it with the request's context, so the span is the request's, as
// an OpenTelemetry middleware such as otelgin, run before the limiter,
// started it. It does nothing when ctx has no recording span.
func Trace(ctx context.Context, e ginlimit.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, keyRule.String(e.Rule), keyOutcome.String(string(e.Outcome)))
	switch e.Outcome {
	case ginlimit.OutcomeUnauthorized:
		attrs = append(attrs, keyReason.String(e.Reason))
	case ginlimit.OutcomeReset:
	default:
		d := &e.Decision
		attrs = append(attrs, keyLimit.Int(d.Limit), keyRemaining.Int(d.Remaining))
		if d.RetryAfter > 0 {
			attrs = append(attrs, keyRetryAfter.Float64(d.RetryAfter.Seconds()))
		}
	}
	span.AddEvent(spanEvent, trace.WithAttributes(attrs...))
}

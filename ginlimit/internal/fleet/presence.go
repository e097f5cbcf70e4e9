package fleet

import "context"

// beat renews the instance's id and takes the count Redis answers; when
// Redis does not answer, the count stays the last one seen. A beat waits
// at most callBound, less than a Tick, so beats never pile up.
func (f *Fleet) beat(ctx context.Context) error {
	reply, _, err := f.cfg.Engine.Aside(ctx, callBound, beatScript, []string{InstancesKey},
		[]any{f.id, HeartbeatTTL.Milliseconds(), ResetChannel, f.echo})
	if err != nil {
		return err
	}
	f.polls.Add(1)
	if len(reply) == 1 && reply[0] >= 1 {
		f.cfg.Count.Store(int(min(reply[0], 1e6)))
	}
	return nil
}

// leave takes the id out of InstancesKey, so that the instances that stay
// stop counting it at their next beat, not a HeartbeatTTL later: short
// lived Limiters would otherwise shrink every outage share. It is best
// effort, bounded as a beat is, and fails at once while the breaker is
// open: an id left behind expires within HeartbeatTTL anyway. An id whose
// beat Redis never answered is not there, and costs no call.
func (f *Fleet) leave() {
	if !f.cfg.Count.Heard() {
		return
	}
	_, _, _ = f.cfg.Engine.Aside(context.Background(), callBound, leaveScript, []string{InstancesKey}, []any{f.id})
}

// Beat renews the instance's id now, as the loop does every
// HeartbeatPeriod, for tests that drive the loop.
func (f *Fleet) Beat(ctx context.Context) error { return f.beat(ctx) }

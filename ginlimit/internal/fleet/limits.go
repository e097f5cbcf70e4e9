package fleet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// load reads the overrides whole (one call) and, when their version is
// not the one applied, hands them to OnLimits.
func (f *Fleet) load(ctx context.Context) error {
	f.refresh.Lock()
	defer f.refresh.Unlock()
	f.stale.Store(false)
	reply, err := f.cfg.Engine.AsideTexts(ctx, callBound, loadScript, []string{LimitsKey, LimitsVersionKey}, nil)
	if err != nil {
		f.stale.Store(true) // the next tick tries again
		return err
	}
	f.polls.Add(1)
	version, err := strconv.ParseInt(reply[0], 10, 64)
	if err != nil || len(reply)%2 != 1 {
		return fmt.Errorf("unexpected overrides reply of %d strings", len(reply))
	}
	if version == f.version.Load() {
		return nil
	}
	fields := reply[1:]
	if version == 0 { // no override was ever set, or the keys were deleted
		fields = nil
	}
	if f.cfg.OnLimits != nil {
		f.cfg.OnLimits(NewOverrides(fields, f.cfg.Canonical))
	}
	f.version.Store(version)
	return nil
}

// Change is one change of LimitsKey: an override's field, its value
// ("limit window_us", or "" to clear it), the quota of its kind and
// whether it is a rule's or a plan's (or an identity's).
type Change struct {
	Field, Value string
	Quota        int
	Rule         bool
}

// SetLimit stores c in LimitsKey, with a new version, within queue and
// timeout as a decision; refused says that c's kind is at its quota.
// Then it tells every instance (a notice) and applies the change here
// before it returns; applied is why it could not, when it could not: the
// change is stored, and this instance applies it with its next tick.
func (f *Fleet) SetLimit(ctx context.Context, queue, timeout time.Duration, c Change) (refused bool, applied, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	// 1 to 2^53-1: exact in the scripts' numbers, never the 0 of no version.
	version := strconv.FormatUint(binary.BigEndian.Uint64(b[:])>>11|1, 10)
	rule := "0"
	if c.Rule {
		rule = "1"
	}
	args := []any{c.Field, c.Value, c.Quota, version, rule}
	reply, _, err := f.cfg.Engine.Run(ctx, queue, timeout, setLimit, []string{LimitsKey, LimitsVersionKey}, args)
	if err != nil {
		return false, nil, err
	}
	if len(reply) == 1 && reply[0] < 0 {
		return true, nil, nil
	}
	// A notice that is lost is caught by the others' polls (OverridePoll).
	nctx, cancel := context.WithTimeout(ctx, HubTimeout)
	_, _ = f.publish(nctx, "limits "+version)
	cancel()
	return false, f.load(ctx), nil
}

// Reset deletes keys, all in one slot, within queue and timeout as a
// decision, then tells every instance and waits, at most wait, for each
// to drop what it holds for them (see Announce): announced is why not
// every one acknowledged in time, when so.
func (f *Fleet) Reset(ctx context.Context, queue, timeout time.Duration, keys []string, wait time.Duration) (announced, err error) {
	if _, _, err := f.cfg.Engine.Run(ctx, queue, timeout, resetScript, keys, nil); err != nil {
		return nil, err
	}
	return Announce(ctx, f.hub, f.publish, keys, wait), nil
}

// publish sends payload on ResetChannel and returns how many subscribers
// received it (a Publish).
func (f *Fleet) publish(ctx context.Context, payload string) (int64, error) {
	reply, _, err := f.cfg.Engine.Aside(ctx, HubTimeout, publishScript, []string{ResetChannel}, []any{ResetChannel, payload})
	if err != nil {
		return 0, err
	}
	if len(reply) != 1 {
		return 0, fmt.Errorf("unexpected PUBLISH reply of %d elements", len(reply))
	}
	return reply[0], nil
}

package console

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// holdScripts is a client hook that holds the first script call made
// after arm until release: a beat caught in its Redis call.
type holdScripts struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (h *holdScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.mu.Lock()
			hold := h.armed
			h.armed = false
			h.mu.Unlock()
			if hold {
				close(h.entered)
				<-h.release
			}
		}
		return next(ctx, cmd)
	}
}

// TestPageDuringBeatKeepsWhatInstanceKnew: a rule's page drawn while a
// beat is in its Redis call still shows the traffic, refusals and ban
// this instance saw before the beat took them; once the beat is done,
// the page shows them once, not twice.
func TestPageDuringBeatKeepsWhatInstanceKnew(t *testing.T) {
	srv := redistest.Start(t)
	own := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = own.Close() })
	hold := &holdScripts{entered: make(chan struct{}), release: make(chan struct{})}
	own.AddHook(hold)
	in := newInstance(t, srv.Client(), own, ginlimit.DenyCache(0))
	if err := in.console.Beat(context.Background()); err != nil { // loads the script
		t.Fatal(err)
	}
	for range 6 {
		in.claim("mallory") // 2 allowed, then refused, banned after 3 refusals
	}
	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- in.console.Beat(context.Background()) }()
	<-hold.entered
	check := func(when string) {
		t.Helper()
		var d rulePageData
		w := in.get("/console/api/rule?"+url.Values{"route": {claimRoute}, "rule": {"claim"}}.Encode(), false)
		if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
			t.Fatal(err, w.Body.String())
		}
		var total int64
		for _, r := range d.Traffic {
			total += r.Total
		}
		if total != 6 || len(d.Refused) != 1 || d.Refused[0].Count != 4 || len(d.Bans) != 1 {
			t.Errorf("%s: %d decisions (want 6), refused %+v (want 4 of one), bans %+v (want 1)", when, total, d.Refused, d.Bans)
		}
	}
	check("during the beat's call")
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check("after the beat")
}

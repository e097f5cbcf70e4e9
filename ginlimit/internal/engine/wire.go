package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// wire is the memory of one call to Redis, in one allocation: the context
// that bounds it (callContext), its EVALSHA's arguments, and its reply's
// integers. Made apart, as Script.Run and lua.Ints make them, they cost an
// allocation each on every decision. A wire is never reused: a call
// abandoned at its deadline may still be written, and read into, by
// go-redis (the pipeliner runs what it was given) or by its goroutine
// (bounded).
type wire struct {
	start time.Time // when the call began (runOn)
	ctx   callCtx
	used  bool // an attempt took it (see take)
	args  [wireArgs]any
	ints  [wireInts]int64
}

// A wire holds what a single-rule decision needs, no more, so that it
// stays small (the garbage collector's work grows with it); a call that
// needs more allocates it apart.
const (
	// wireArgs holds the EVALSHA of a single-rule decision: the command,
	// the SHA1, the key count, the key, the clock and the cost.
	wireArgs = 6
	// wireInts holds a single-rule decision's reply: six integers (see
	// lua.Single).
	wireInts = 6
)

// take returns w for a call's first attempt, and a wire of its own for a
// retry (node.call tries again on a broken connection), whose first
// attempt may still be running in an abandoned goroutine (bounded).
func (w *wire) take() *wire {
	if w.used {
		return &wire{used: true}
	}
	w.used = true
	return w
}

// script is what an engine keeps of a script it has run.
type script struct {
	// sha is the script's SHA1, boxed once: boxing a string for the
	// command's arguments is an allocation on every call.
	sha any
	// packed is set once the script replied a string. A string reply is
	// then read as a string (redis.StringCmd): a generic reply (redis.Cmd)
	// would box it, an allocation on every call. ginlimit's decision
	// scripts reply their integers packed in a string (see lua.Ints); the
	// in-flight script and a few others reply an array, which only a
	// generic command can read. A script's reply always has the same shape
	// (a reply error aside), so its first reply tells which it is.
	packed atomic.Bool
}

// scriptOf returns what e keeps of s.
func (e *Engine) scriptOf(s *redis.Script) *script {
	if v, ok := e.scripts.Load(s); ok {
		return v.(*script)
	}
	v, _ := e.scripts.LoadOrStore(s, &script{sha: s.Hash()})
	return v.(*script)
}

// command returns the EVALSHA of sc on keys with args, in w's memory, on
// the call's context ctx.
func (w *wire) command(ctx context.Context, sc *script, keys []string, args []any) redis.Cmder {
	a := w.args[:0]
	if n := 3 + len(keys) + len(args); n > len(w.args) {
		a = make([]any, 0, n)
	}
	a = append(a, "evalsha", sc.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	var cmd redis.Cmder
	if sc.packed.Load() {
		cmd = redis.NewStringCmd(ctx, a...)
	} else {
		cmd = redis.NewCmd(ctx, a...)
	}
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // as go-redis's Eval does: the cluster's slot is keys[0]'s
	}
	return cmd
}

// reply returns the integers of cmd's reply, cmd being a command of sc
// that succeeded, in w's memory; and notes whether sc replies a string.
func (w *wire) reply(sc *script, cmd redis.Cmder) ([]int64, error) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return unpack(w.ints[:0], c.Val())
	case *redis.Cmd:
		v := c.Val()
		if _, ok := v.(string); ok {
			sc.packed.Store(true)
		}
		return decode(w.ints[:0], v)
	}
	return nil, fmt.Errorf("unexpected command %T", cmd)
}

// processor is a client that runs a command it is given, as
// *redis.Client, *redis.ClusterClient and *redis.Ring do.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalSha runs s on c as Script.Run does (EVALSHA, then EVAL on
// NOSCRIPT), with the command's memory in w when c runs the commands it is
// given, and returns the reply's integers.
func (e *Engine) evalSha(ctx context.Context, c redis.Scripter, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	p, ok := c.(processor)
	if !ok {
		return ints(s.Run(ctx, c, keys, args...))
	}
	sc := e.scriptOf(s)
	cmd := w.command(ctx, sc, keys, args)
	err := p.Process(ctx, cmd)
	switch {
	case err == nil:
		return w.reply(sc, cmd)
	case noScript(err):
		return ints(s.Eval(ctx, c, keys, args...))
	}
	return nil, err
}

// noScript reports whether err says Redis does not know the script (after
// SCRIPT FLUSH or a restart).
func noScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// ints returns the integers of a script's reply (see decode).
func ints(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return decode(nil, v)
}

// decode appends to dst the integers of a script's reply: a string of 8
// bytes per integer, big-endian and two's complement, as the scripts reply
// (lua.Ints reads the same format: TestDecodeAgreesWithLuaInts); or, from
// a fake that answers in their place, an array of integers.
func decode(dst []int64, reply any) ([]int64, error) {
	switch r := reply.(type) {
	case string:
		return unpack(dst, r)
	case []any:
		for i, v := range r {
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("unexpected reply element %d of type %T", i, v)
			}
			dst = append(dst, n)
		}
		return dst, nil
	}
	return nil, fmt.Errorf("unexpected reply of type %T", reply)
}

// unpack appends to dst the integers packed in a script's string reply (see
// decode).
func unpack(dst []int64, r string) ([]int64, error) {
	if len(r)%8 != 0 {
		return nil, fmt.Errorf("unexpected reply of %d bytes", len(r))
	}
	for i := 0; i < len(r); i += 8 {
		var v uint64
		for j := i; j < i+8; j++ {
			v = v<<8 | uint64(r[j])
		}
		dst = append(dst, int64(v))
	}
	return dst, nil
}

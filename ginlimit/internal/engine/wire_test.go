package engine

import (
	"context"
	_ "embed"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/lua"
)

// FuzzDecodeAgreesWithLuaInts: the engine reads a script's reply as
// lua.Ints does, the format's own reader: the same integers from a packed
// string of any length, and from an array of integers or of other types;
// an error exactly where lua.Ints gives one.
func FuzzDecodeAgreesWithLuaInts(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(binary.BigEndian.AppendUint64(nil, 1<<63|5), false)
	f.Add([]byte("0123456789abcdef"), false)
	f.Add([]byte("0123456"), false)
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, true)
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, data []byte, array bool) {
		var reply any = string(data)
		if array {
			// Each byte an element: an integer, or for bytes above 200, a
			// string, which neither may accept.
			a := make([]any, len(data))
			for i, b := range data {
				a[i] = int64(b) - 100
				if b > 200 {
					a[i] = string(rune(b))
				}
			}
			reply = a
		}
		want, wantErr := lua.Ints(reply)
		got, err := decode(nil, reply)
		if (err != nil) != (wantErr != nil) || !slices.Equal(got, want) {
			t.Fatalf("decode(%#v) = %v, %v; lua.Ints gives %v, %v", reply, got, err, want, wantErr)
		}
	})
}

// packedOne is a script that touches no key and answers 1 packed as the
// decision scripts pack their integers (lua.Ints).
var packedOne = redis.NewScript(packedOneLua)

//go:embed testdata/packed_one.lua
var packedOneLua string

// TestReplyShapes: on every path of a call (directly on a client that
// honours the context, through the clone that bounds reads, through the
// pipeliner), a script that replies an array and one that replies a
// packed string both read right on every call: the first, read as any
// reply, tells the engine the shape (script.packed), and the packed one is
// then read as a string; after SCRIPT FLUSH, NOSCRIPT loads it again.
func TestReplyShapes(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name     string
		honours  bool
		pipeline bool
	}{
		{"direct", true, false},
		{"bound clone", false, false},
		{"pipelined", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: tc.honours})
			t.Cleanup(func() { _ = c.Close() })
			e, err := New(Config{Client: c, AutoPipeline: tc.pipeline})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			if tc.pipeline {
				e.SetPipelineAbove(0) // every call through the pipeliner
			}
			ctx := context.Background()
			for i := range 3 {
				if i == 2 {
					if err := c.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range []*redis.Script{one, packedOne} {
					reply, _, err := e.Run(ctx, time.Second, 5*time.Second, s, []string{"k"}, []any{"a"})
					if err != nil || !slices.Equal(reply, []int64{1}) {
						t.Fatalf("call %d of %q: %v, %v; want [1]", i, s.Hash(), reply, err)
					}
				}
			}
			if e.transport.scriptOf(one).packed.Load() || !e.transport.scriptOf(packedOne).packed.Load() {
				t.Errorf("packed: array script %v, packed script %v; want false, true", e.transport.scriptOf(one).packed.Load(), e.transport.scriptOf(packedOne).packed.Load())
			}
		})
	}
}

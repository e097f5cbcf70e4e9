package lua

import (
	_ "embed"
	"testing"
)

// prologue is prologue.lua, which TestPack runs alone.
//
//go:embed prologue.lua
var prologue string

// SeveralNumbered builds the several-rule script with the algorithms named
// names numbered in that order. generated_test.go (package lua_test) sets
// it from the generator, which package lua's own tests cannot import: the
// generator imports package lua for its constants.
var SeveralNumbered func(names ...string) (string, error)

// severalNumbered is SeveralNumbered, failing t on an error.
func severalNumbered(t *testing.T, names ...string) string {
	t.Helper()
	if SeveralNumbered == nil {
		t.Fatal("SeveralNumbered is not set: generated_test.go sets it")
	}
	src, err := SeveralNumbered(names...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

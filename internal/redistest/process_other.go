//go:build !linux

package redistest

import "os/exec"

func setDeathSignal(*exec.Cmd) {}

// reserve holds nothing off Linux: see process_linux.go.
func reserve(int) (release func()) { return func() {} }

//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing outside Linux, which has no parent-death
// signal; stop (and the interrupt handler in main) still kill the server.
func setDeathSignal(*exec.Cmd) {}

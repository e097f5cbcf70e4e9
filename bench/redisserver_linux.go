package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill redis-server if this program dies
// before it can stop the server, so no server outlives a crashed run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

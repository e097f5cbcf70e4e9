package app

import "context"

// BeatConsole runs one beat of the console, for tests that drive it
// rather than wait for it.
func (a *App) BeatConsole(ctx context.Context) error { return a.console.Beat(ctx) }

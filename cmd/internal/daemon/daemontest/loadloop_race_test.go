//go:build race

package daemontest

// underRace says the race detector is on: the load tests then play a fifth of their load,
// which the detector makes five to ten times slower.
const underRace = true

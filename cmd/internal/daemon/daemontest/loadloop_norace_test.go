//go:build !race

package daemontest

// underRace says the race detector is on (see loadloop_race_test.go).
const underRace = false

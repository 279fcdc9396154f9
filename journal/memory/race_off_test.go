//go:build !race

package memory

// underRace says the race detector is on (see race_on_test.go).
const underRace = false

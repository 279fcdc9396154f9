//go:build race

package memory

// underRace says the race detector is on: the team property test then runs a sixth of
// its cases, each of which the detector makes about ten times slower.
const underRace = true

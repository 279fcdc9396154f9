// Package redacttest draws secrets in every shape runtime/redact promises to remove, the
// characters that may stand before them and the containers they travel in, for the
// property tests of each path into storage (the redactor itself, dead letters, the
// memory store). It is a test kit: only tests import it (runtime/deps_test.go keeps it
// out of every binary). It imports runtime/redact's rule names by value only, the
// standard library and pgregory.net/rapid, nothing else of thatch.
package redacttest

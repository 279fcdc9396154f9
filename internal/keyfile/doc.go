// Package keyfile reads, creates and repairs thatch's secret files (the shim token, the
// broker token, the broker's store key): one rule for all of them. A file is read without
// following a link, must be a regular file of this user, and is written atomically with
// mode 0600. What each caller does with an unsafe file (replace it, or refuse it) is its
// Rules; what was done comes back for the caller's own words.
//
// It imports nothing of thatch, so commands and the adapters may use it.
package keyfile

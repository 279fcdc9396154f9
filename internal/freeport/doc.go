// Package freeport finds loopback TCP ports for the servers that tests, test rigs and the
// bench start: free when asked, and out of the range the kernel hands to outgoing
// connections.
//
// It imports nothing of thatch, so any test helper may use it.
package freeport

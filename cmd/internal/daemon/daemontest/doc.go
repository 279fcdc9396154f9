// Package daemontest is the daemon rig every behaviour test of thatch's daemon shares: an
// embedded broker (testkit.StartBroker), a fake host on it, a data folder in t.TempDir(),
// and daemon.Serve started, stopped and started again on the same files, in process. Its
// own tests are the daemon's behaviour tests that need neither the built binary nor the
// CLI (the integration package, in the spirit of tailscale's tstest/integration).
//
// It imports the daemon, the journal, the runtime's scenario dump, the fake host and the
// test kit; it imports testing, so no binary may import it (runtime/deps_test.go keeps
// that rule), and nothing of thatch but tests imports it.
package daemontest

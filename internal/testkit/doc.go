// Package testkit is what thatch's tests share, in the spirit of tailscale's tstest and
// nats-server's RunServer and checkFor: WaitFor polls a condition until it holds or a
// timeout passes, failing with what it waited for and the condition's last reason, so
// that no test sleeps to synchronise; Broker and StartBroker run an in-process
// nats-server (JetStream, a token, a store in t.TempDir()) that the test's cleanup shuts
// down, and Connect gives a client of it; Logger is a slog.Logger that writes into the
// test's output, shown when the test fails or runs with -v.
//
// It imports nothing of thatch, so that every package's tests, the adapters' own
// included, may use it without a cycle, and no binary imports it (it imports testing):
// runtime/deps_test.go keeps both rules.
package testkit

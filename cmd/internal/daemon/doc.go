// Package daemon is thatch's wiring: the configuration read from THATCH_* variables
// (Config), the daemon that puts the broker, the journal, the memory store, the runtime
// loop, the API, the sweeps, the web endpoint and the opencode bridge together (Serve),
// the bridge on its own (Bridge), the status file, the install of opencode's files, the
// logger, and the client of the daemon's API (API).
//
// It lives under cmd/internal so that exactly the binaries under cmd/ import it: thatch,
// whose subcommands are this package's front, and thatch-bench, which starts the same
// daemon in process to measure it. It imports the adapters, the journal, the runtime and
// commands; it must never import a test double (adapters/fakehost, adapters/fakellm),
// since thatch's binary links everything it imports.
package daemon

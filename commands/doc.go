// Package commands holds the /thatch/compact and /thatch/exit command templates and the
// opencode plugin shim, embedded in the binary, and the installer that writes them where
// opencode discovers them ($XDG_CONFIG_HOME/opencode/command/thatch/ and
// $XDG_CONFIG_HOME/opencode/plugin/thatch.js). The installer writes only files
// whose content differs, so template updates self-heal and unchanged files keep their
// modification time. opencode reads commands and plugins at start, so a first install shows after the
// host's next start. It also owns the shim's token file (EnsureToken, ReadToken), which the
// installer, the bridge and the plugin share.
//
// It is a leaf: it imports no package of thatch but runtime/protocol (the wire's names)
// and internal/keyfile (the secret files' rule), so that the daemon's wiring and the
// opencode bridge can both import it.
package commands

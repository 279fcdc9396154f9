package daemon

import (
	"log/slog"
	"os"
	"os/user"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/claudecode"
)

// ClaudeCodeHostID is the host id of this user's Claude Code sessions for c's thatch: thatch
// hook publishes as it, and thatch serve answers its host API.
func ClaudeCodeHostID(c Config) string {
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return claudecode.HostID(name, c.DataDir)
}

// newClaudeCodeHost is the responder of this user's Claude Code host (protocol §10): it
// runs extraction children with THATCH_CLAUDE_BIN, their MCP server this thatch binary.
func newClaudeCodeHost(c Config, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) *claudecode.Host {
	self, err := os.Executable()
	if err != nil {
		self = "thatch"
	}
	return &claudecode.Host{NC: nc, JS: js, Prefix: c.SubjectPrefix, APIPrefix: c.APIPrefix, ID: ClaudeCodeHostID(c),
		Claude: c.ClaudeBin, Thatch: self, Env: []string{"THATCH_DATA_DIR=" + c.DataDir},
		Log: log.With("component", "claudecode")}
}

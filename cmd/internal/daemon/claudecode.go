package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/opencode"
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

// PublishSpooled publishes one Claude Code hook event (a hook's own or a spooled one). A
// body over the broker's bound is cut to fit as opencode's bridge cuts its events
// (opencode.Fit: the longest strings, a tool's output first, keep their head and tail),
// told to cut with its size before and after. An event the broker still cannot take is
// dropped, told to dropped, rather than holding up the spool behind it.
func PublishSpooled(ctx context.Context, js jetstream.JetStream, e claudecode.Spooled, cut func(from, to int), dropped func(error)) error {
	if limit := opencode.EventLimit(js.Conn().MaxPayload()); len(e.Body) > limit {
		from := len(e.Body)
		e.Body = fitBody(e.Body, limit)
		cut(from, len(e.Body))
	}
	_, err := natsbus.PublishEvent(ctx, js, e.Subject, e.Body, e.ID, "")
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload) {
		dropped(err)
		return nil
	}
	return err
}

// fitBody is an event body (id, type, properties, as opencode's) cut to limit bytes by
// opencode.Fit; a body of another shape is returned as it is.
func fitBody(body json.RawMessage, limit int) json.RawMessage {
	var ev opencode.Event
	if err := json.Unmarshal(body, &ev); err != nil || len(ev.Properties) == 0 {
		return body
	}
	return opencode.Fit(ev, limit).Body()
}

// drainHookSpool delivers the events Claude Code's hooks kept while thatch was down
// (claudecode.Spool), in order, until the spool is empty; a failure is logged and left to
// the next hook that gets through.
func drainHookSpool(ctx context.Context, c Config, js jetstream.JetStream, log *slog.Logger) {
	sp := claudecode.Spool{Dir: claudecode.SpoolDir(c.DataDir), Rejected: func(path string, err error) {
		log.Warn("claude code hook spool: a file that cannot be decoded is set aside, its good events sent; read it, then delete it", "file", path, "err", err)
	}}
	total := 0
	for sp.Pending() && ctx.Err() == nil {
		n, err := sp.Drain(ctx, func(ctx context.Context, e claudecode.Spooled) error {
			return PublishSpooled(ctx, js, e, func(from, to int) {
				log.Info("claude code hook spool: an event cut to fit the broker", "id", e.ID, "bytes", from, "cut_to", to)
			}, func(err error) {
				log.Warn("claude code hook spool: an event too big for the broker dropped", "id", e.ID, "err", err)
			})
		})
		total += n
		if err != nil {
			log.Warn("claude code hook spool: delivery stopped; the next hook that reaches thatch goes on", "delivered", total, "err", err)
			return
		}
		if n == 0 {
			break // another drainer (a hook) holds it: it sends the rest
		}
	}
	if total > 0 {
		log.Info("claude code hook spool delivered: events of hooks that ran while thatch was down", "events", total)
	}
}

// claudeMissing is serve's warning when Claude Code is set up for this thatch (the hooks in
// home's ~/.claude/settings.json name c's data folder) but the claude binary its
// extraction children run is not found: their extractions would fail, one by one. "" when
// all is well or Claude Code is not set up for this thatch.
func claudeMissing(home string, c Config) string {
	if !claudeSetUp(home, c) {
		return ""
	}
	if _, err := exec.LookPath(c.ClaudeBin); err == nil {
		return ""
	}
	return fmt.Sprintf("Claude Code's hooks send to this thatch, but the claude binary %q is not found, so their extractions will fail: put claude on thatch serve's PATH or set THATCH_CLAUDE_BIN to its path", c.ClaudeBin)
}

// hostsLine is serve's start log of the hosts it serves, as attributes: opencode's bridge
// (one only when THATCH_OPENCODE_URL is set; a host connected to the broker needs none),
// Claude Code (its hooks and thatch mcp reach thatch over the broker; claudeHooks says
// whether thatch install --host claude-code named this data folder) and MCP clients.
func hostsLine(c Config, claudeHooks bool) []any {
	opencode := "no bridge (THATCH_OPENCODE_URL is unset: set it to an opencode serve to bridge one; a host on the broker needs none)"
	if c.OpencodeURL != "" {
		opencode = "bridging " + c.OpencodeURL
	}
	claude := "not set up for this data folder (thatch install --host claude-code sets it up)"
	if claudeHooks {
		claude = "hooks installed for this data folder: its sessions and thatch mcp reach thatch over the broker"
	}
	return []any{"opencode", opencode, "claude_code", claude, "mcp", "any MCP client runs thatch mcp, which reaches thatch over the broker"}
}

// claudeSetUp reports whether the hooks in home's ~/.claude/settings.json name c's data
// folder: thatch install --host claude-code was run for this thatch.
func claudeSetUp(home string, c Config) bool {
	data, err := os.ReadFile(filepath.Join(home, ".claude", "settings.json"))
	if err != nil {
		return false
	}
	var settings struct {
		Hooks map[string][]struct {
			Hooks []struct {
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if json.Unmarshal(data, &settings) != nil {
		return false
	}
	quoted := "'" + strings.ReplaceAll(c.DataDir, "'", `'\''`) + "'"
	ours := false
	for _, groups := range settings.Hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				if strings.Contains(h.Command, " hook ") && (strings.Contains(h.Command, "THATCH_DATA_DIR="+c.DataDir+" ") ||
					strings.Contains(h.Command, "THATCH_DATA_DIR="+quoted+" ")) {
					ours = true
				}
			}
		}
	}
	return ours
}

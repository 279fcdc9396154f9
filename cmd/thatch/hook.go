package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// hookCommand is thatch hook: what Claude Code's hooks run (protocol §10).
type hookCommand struct {
	stdin io.Reader // the hook's input; os.Stdin when nil
}

func (*hookCommand) Usage() usage {
	return usage{Name: "hook", Args: []string{"EVENT"}, Summary: "a Claude Code hook: its input on stdin becomes the events of a thatch host (thatch install --host claude-code sets it up)",
		Help: `a Claude Code hook (SessionStart, UserPromptSubmit, PostToolUse, Stop, PreCompact,
SessionEnd): it reads the hook's input on standard input and publishes its session's events
to the running thatch as the host cc-… of this user and data folder; SessionStart prints
the session-start text (the reminder and the project's memories) as Claude Code's
additionalContext. It never blocks Claude Code: within a few seconds, whatever thatch does,
it exits 0 (a problem goes to standard error, which Claude Code shows in --debug).`}
}

func (*hookCommand) Flags(*flag.FlagSet) {}

// hookBudget bounds a hook's work: Claude Code waits for it before the turn goes on.
const hookBudget = 4 * time.Second

// hookInputMax is the most of a hook's input read (a tool's response can be large; the
// entry keeps THATCH_INTERACTION_OUTPUT_MAX of it).
const hookInputMax = 4 << 20

func (h *hookCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	stdin := h.stdin
	if stdin == nil {
		stdin = os.Stdin
	}
	if os.Getenv(claudecode.ChildEnv) != "" {
		_, _ = io.Copy(io.Discard, io.LimitReader(stdin, hookInputMax))
		return nil // thatch's own extraction child: never journaled
	}
	ctx, cancel := context.WithTimeout(ctx, hookBudget)
	defer cancel()
	if err := runHook(ctx, c, out, args[0], stdin); err != nil {
		fmt.Fprintf(os.Stderr, "thatch hook %s: %v\n", args[0], err)
	}
	return nil // never an exit code that blocks or warns in Claude Code
}

// bootID is the machine's boot id: a Claude Code host has no process of its own, so its
// boot (rule 7) is the machine's.
func bootID() string {
	if data, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil && len(strings.TrimSpace(string(data))) > 0 {
		return "boot-" + strings.TrimSpace(string(data))
	}
	return "boot-unknown"
}

func runHook(ctx context.Context, c daemon.Config, out io.Writer, event string, stdin io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(stdin, hookInputMax))
	if err != nil {
		return fmt.Errorf("read the hook's input: %w", err)
	}
	var in claudecode.Input
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("the hook's input is not JSON: %w", err)
	}
	if in.Event == "" {
		in.Event = event
	}
	projectID, top := "", ""
	if in.Event == "SessionStart" || in.Event == "Stop" {
		if in.Cwd != "" {
			projectID, top, _ = memory.ProjectID(ctx, in.Cwd) // outside git: the folder is the key
		}
	}
	seq := strconv.FormatInt(time.Now().UnixNano(), 36)
	if in.PromptID != "" {
		seq = in.PromptID
	}
	evs, err := claudecode.Events(in, projectID, seq)
	if err != nil || len(evs) == 0 {
		return err
	}
	host := daemon.ClaudeCodeHostID(c)
	var msgs []claudecode.Spooled
	add := func(e claudecode.Event) error {
		body, err := e.Body()
		msgs = append(msgs, claudecode.Spooled{Subject: c.SubjectPrefix + "." + host + ".event." + e.Type, ID: e.ID, Body: body})
		return err
	}
	if in.Event == "SessionStart" {
		boot := bootID()
		if top == "" {
			top = in.Cwd
		}
		hello := claudecode.Event{ID: "cc_hello_" + host + "_" + seq, Type: protocol.EventHostHello, Props: map[string]any{
			"hostID": host, "api": "v1", "version": "claude-code", "bootID": boot, "directory": in.Cwd, "worktree": top,
			"projectID": projectID, "capabilities": map[string]any{"context": true, "list": true}}}
		if err := add(hello); err != nil {
			return err
		}
	}
	var turn []byte // Stop: the turn's last reply, for this host's responder
	if in.Event == "Stop" {
		// The turn's last reply goes to this host's responder before the idle: the idle
		// may resolve a wrap-up, which reads it (rule 6).
		headless := claudecode.Headless(os.Getenv("CLAUDE_CODE_ENTRYPOINT"))
		pid, _ := strconv.Atoi(os.Getenv("CLAUDE_PID"))
		turn, _ = json.Marshal(claudecode.Turn{SessionID: in.SessionID, Text: in.LastAssistant, Headless: headless, PID: pid})
		defer func() {
			if o := claudecode.StopOutput(in, headless); o != nil {
				_, _ = out.Write(o)
			}
		}()
	}
	for _, e := range evs {
		if err := add(e); err != nil {
			return err
		}
	}
	nc, err := dialWith(c, nats.Name("thatch-hook"), nats.NoReconnect(), nats.Timeout(time.Second))
	if err != nil {
		// Kept, redacted, until thatch is reachable (thatch serve's start or the next hook).
		return spoolHook(c, msgs, fmt.Errorf("thatch is not running or cannot be reached (start it with `thatch serve`): %w", err))
	}
	defer nc.Close()
	if turn != nil {
		if _, err := nc.RequestWithContext(ctx, c.SubjectPrefix+"."+host+".api."+claudecode.MethodTurn, turn); err != nil {
			fmt.Fprintf(os.Stderr, "thatch hook Stop: tell thatch the turn's last reply (a wrap-up command cannot proceed without it): %v\n", err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := deliverHook(ctx, c, js, msgs); err != nil {
		fmt.Fprintf(os.Stderr, "thatch hook %s: %v\n", in.Event, err) // spooled: the start text is still asked for
	}
	if in.Event != "SessionStart" {
		return nil
	}
	// The start text: the reminder and the memories at a new session's start, the memory
	// section alone after a compaction (the start text is frozen per session).
	method, params := "session.context", map[string]string{"sessionID": in.SessionID, "projectID": projectID, "directory": in.Cwd}
	if in.Source == "compact" {
		method, params = "memory.context", map[string]string{"sessionID": in.SessionID}
	}
	body, _ := json.Marshal(params)
	msg, err := nc.RequestWithContext(ctx, c.APIPrefix+".api."+method, body)
	if err != nil {
		return fmt.Errorf("ask thatch for the session's start text: %w", err)
	}
	res, rerr, err := protocol.Decode(msg.Data)
	if err == nil && rerr != nil {
		err = errors.New(rerr.Name + ": " + rerr.Message)
	}
	if err != nil {
		return fmt.Errorf("thatch's %s: %w", method, err)
	}
	var r struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(res, &r); err != nil || strings.TrimSpace(r.Text) == "" {
		return err
	}
	text, err := claudecode.ContextOutput(r.Text)
	if err != nil {
		return err
	}
	_, err = out.Write(text)
	return err
}

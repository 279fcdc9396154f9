package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// Thatch is the running thatch as the server reaches it.
type Thatch interface {
	// Tool performs the memory tool name for call's project and returns its answer; an
	// error says what went wrong and what to do, in words for the client's user.
	Tool(ctx context.Context, name string, call Call) (Answer, error)
	// Section is the memory section of a project (§6 injection, within
	// THATCH_MEMORY_INJECT_CHARS), "" when it has no memories; dir, when known, is where
	// the client works (a branch's memories are shown on that branch only).
	Section(ctx context.Context, project, dir string) (string, error)
}

// Call is a memory tool call from an MCP client.
type Call struct {
	Project   string // the project key
	Directory string // the folder the project was keyed from; "" for a --project key
	Client    string // the MCP client's name, from its initialize
	// Session, when the server serves an extraction child (Options.Session): the call is
	// that session's, as a host forwards its model's calls (protocol §3), not the project's.
	Session string
	Args    any // the tool's arguments, as JSON encodes them
}

// Answer is a memory tool's answer: the text for the model and the metadata.
type Answer struct {
	Output   string
	Metadata json.RawMessage
}

// Options configure the server.
type Options struct {
	Thatch Thatch
	// Project is --project: a folder (keyed as opencode keys it) or a project key. "" takes
	// the client's first root, else Dir.
	Project string
	Dir     string // the working directory
	Version string // thatch's version, the server's
	Log     *slog.Logger
	// Session makes the server an extraction child's (thatch mcp --extraction SESSION, the
	// headless Claude Code child thatch runs for a Claude Code session): every tool call is
	// that session's, and the extraction tools thatch_get_extraction_payload and
	// thatch_extraction_done are offered too (protocol §3, §10).
	Session string
	// Owner is the Claude Code session whose process runs this server (the
	// CLAUDE_CODE_SESSION_ID Claude Code gives its MCP servers): the extraction tools are
	// offered too, and their calls are that session's, a top-level session claiming its
	// own entries, which is how a wrap-up command flushes (protocol §3, rule 6). The
	// memory tools stay the project's.
	Owner string
	// RootsTimeout bounds the client's answer to roots/list (default 3 s): a client that
	// says it has roots and never lists them falls back to Dir.
	RootsTimeout time.Duration
}

// URI is the resource that holds the project's memory section; Prompt the prompt that does.
const (
	URI    = "thatch://memories"
	Prompt = "memories"
)

// protocolVersions are the protocol versions the server speaks: those of the initialize
// handshake, whose clients (Claude Code, Cursor, Codex) answer roots/list when asked. A
// client of the stateless 2026-07-28 protocol is refused it and falls back to one of them.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// server is the state behind the handlers: the project, keyed once per list of roots.
type server struct {
	o     Options
	mu    sync.Mutex
	at    *place // the project, once keyed; nil again when the client's roots change
	roots int    // how many times the client said its roots changed
}

// place is a project: its key, and the folder it was keyed from ("" for a key given).
type place struct{ key, dir string }

// New is the MCP server, ready to Run on a transport (sdk.StdioTransport for thatch mcp).
func New(o Options) *sdk.Server {
	o.Log = cmp.Or(o.Log, slog.New(slog.DiscardHandler))
	o.RootsTimeout = cmp.Or(o.RootsTimeout, 3*time.Second)
	s := &server{o: o}
	srv := sdk.NewServer(&sdk.Implementation{Name: "thatch", Title: "thatch memories", Version: o.Version}, &sdk.ServerOptions{
		Instructions: "thatch keeps what was learned about this project, shared with every coding agent that works on it. " +
			"Search the memories (memory_search) before you start on something; remember (memory_remember) what a later session " +
			"should know: a decision, a pitfall, a command, a preference; update or forget what has become wrong.",
		Logger:                    slog.New(atLeast{o.Log.Handler(), slog.LevelWarn}), // not each connection's start and end
		SupportedProtocolVersions: protocolVersions,
		RootsListChangedHandler: func(context.Context, *sdk.RootsListChangedRequest) {
			s.mu.Lock()
			s.at, s.roots = nil, s.roots+1
			s.mu.Unlock()
		},
	})
	kinds := make([]any, len(memory.Kinds))
	for i, k := range memory.Kinds {
		kinds[i] = k
	}
	if o.Session != "" {
		// An extraction child's server answers with text alone: Claude Code gives its model
		// a tool's structured content instead of its text when there is one
		// (docs/claude-code.md), and the payload and the memory tools' answers are text.
		addTextTool[searchArgs](s, srv, o.Session, runtime.ToolSearch, "Search this project's memories: one line each, mem_… (kind) content.", nil)
		addTextTool[rememberArgs](s, srv, o.Session, runtime.ToolRemember, "Remember something about this project for later sessions: one fact, decision, preference, command, pitfall or todo.", nil)
		addTextTool[updateArgs](s, srv, o.Session, runtime.ToolUpdate, "Change a memory of this project: its content, kind or tags.", nil)
		addTextTool[forgetArgs](s, srv, o.Session, runtime.ToolForget, "Forget a memory of this project that is wrong or obsolete.", nil)
		addExtractionTools(s, srv, o.Session)
	} else if o.Owner != "" {
		addExtractionTools(s, srv, o.Owner)
	}
	addTool[searchArgs, searchMeta](s, srv, runtime.ToolSearch,
		"Search this project's memories: the live memories that match the query's words (any order), best first, one line each: mem_… (kind) content. The memories found count as used.",
		func(sc *jsonschema.Schema) {
			sc.Properties["limit"].Minimum, sc.Properties["limit"].Maximum = ptr(1.0), ptr(50.0)
			sc.Properties["kinds"].Items.Enum = kinds
		})
	addTool[rememberArgs, rememberMeta](s, srv, runtime.ToolRemember,
		"Remember something about this project for later sessions (of any coding agent): one fact, decision, preference, command, pitfall or todo, 1 to 2,000 characters. "+
			"The same text again adds nothing; memories that look alike are named, to update instead.",
		func(sc *jsonschema.Schema) {
			sc.Properties["kind"].Enum = kinds
			tagsSchema(sc.Properties["tags"])
		})
	addTool[updateArgs, updateMeta](s, srv, runtime.ToolUpdate,
		"Change a memory of this project: its content, kind or tags (give at least one). With distinctFrom alone, notes that two memories that look alike say different things.",
		func(sc *jsonschema.Schema) {
			sc.Properties["kind"].Enum = kinds
			tagsSchema(sc.Properties["tags"])
		})
	addTool[forgetArgs, forgetMeta](s, srv, runtime.ToolForget,
		"Forget a memory of this project that is wrong or obsolete: it leaves search, listings and the memories given to new sessions.", nil)
	srv.AddResource(&sdk.Resource{URI: URI, Name: "memories", Title: "Memories of this project", MIMEType: "text/plain",
		Description: "The memories thatch gives a new session of this project, most useful first."},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			text, err := s.section(ctx, req.Session)
			if err != nil {
				return nil, rpcError(err)
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: URI, MIMEType: "text/plain", Text: text}}}, nil
		})
	srv.AddPrompt(&sdk.Prompt{Name: Prompt, Title: "Memories of this project",
		Description: "Adds the memories thatch keeps of this project to the conversation."},
		func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			text, err := s.section(ctx, req.Session)
			if err != nil {
				return nil, rpcError(err)
			}
			return &sdk.GetPromptResult{Description: "The memories of this project",
				Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: text}}}}, nil
		})
	return srv
}

// NoMemories is the memory section's text when the project has none.
const NoMemories = "No memories of this project yet."

// section is the memory section of the session's project, for the resource and the prompt.
func (s *server) section(ctx context.Context, ss *sdk.ServerSession) (string, error) {
	p := s.place(ctx, ss)
	text, err := s.o.Thatch.Section(ctx, p.key, p.dir)
	if err != nil {
		return "", err
	}
	return cmp.Or(text, NoMemories), nil
}

// addTool adds the memory tool name, its input schema inferred from In (tune adjusts it)
// and its output schema from Out, the metadata of its answer.
func addTool[In, Out any](s *server, srv *sdk.Server, name, description string, tune func(*jsonschema.Schema)) {
	if s.o.Session != "" {
		return // an extraction child's server has its tools of text (addTextTool)
	}
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("the input schema of %s: %v", name, err))
	}
	if tune != nil {
		tune(in)
	}
	sdk.AddTool(srv, &sdk.Tool{Name: name, Description: description, InputSchema: in},
		func(ctx context.Context, req *sdk.CallToolRequest, args In) (*sdk.CallToolResult, Out, error) {
			var meta Out
			p := s.place(ctx, req.Session)
			client := "unknown"
			if ci := req.ClientInfo(); ci != nil && ci.Name != "" {
				client = ci.Name
			}
			a, err := s.o.Thatch.Tool(ctx, name, Call{Project: p.key, Directory: p.dir, Client: client, Args: args})
			if err != nil {
				return nil, meta, err // a tool error: its text says what to do
			}
			if err := json.Unmarshal(a.Metadata, &meta); err != nil {
				return nil, meta, fmt.Errorf("thatch answered %s with metadata thatch mcp cannot read (%v): run thatch mcp and thatch serve of the same version", name, err)
			}
			if t, ok := any(&meta).(texted); ok {
				t.setText(a.Output) // for a client that shows the structured content alone
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Output}}}, meta, nil
		})
}

// addExtractionTools adds thatch_get_extraction_payload and thatch_extraction_done, called
// as session's (protocol §3).
func addExtractionTools(s *server, srv *sdk.Server, session string) {
	addTextTool[payloadArgs](s, srv, session, runtime.ToolPayload,
		"Claim and read the tool calls of the session to extract memories from: each call's tool, arguments and output, then the project's memories that look like them.", nil)
	addTextTool[doneArgs](s, srv, session, runtime.ToolDone,
		"Say the extraction is done, with how many memories were new, updated and deleted: completes the claimed tool calls.", nil)
}

// addTextTool adds the tool name called as session's (an extraction child's, or the
// Owner's extraction tools): the answer is its text alone, without structured content.
func addTextTool[In any](s *server, srv *sdk.Server, session, name, description string, tune func(*jsonschema.Schema)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("the input schema of %s: %v", name, err))
	}
	if tune != nil {
		tune(in)
	}
	sdk.AddTool(srv, &sdk.Tool{Name: name, Description: description, InputSchema: in},
		func(ctx context.Context, req *sdk.CallToolRequest, args In) (*sdk.CallToolResult, any, error) {
			a, err := s.o.Thatch.Tool(ctx, name, Call{Args: args, Session: session})
			if err != nil {
				return nil, nil, err
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Output}}}, nil, nil
		})
}

// place is the project of the client's calls: Options.Project, else the client's first
// root, else the working directory, keyed once (again after the client's roots change).
func (s *server) place(ctx context.Context, ss *sdk.ServerSession) place {
	s.mu.Lock()
	if s.at != nil {
		defer s.mu.Unlock()
		return *s.at
	}
	roots := s.roots
	s.mu.Unlock()
	p := s.resolve(ctx, ss)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roots == roots { // else the roots changed meanwhile: key again next time
		s.at = &p
	}
	return p
}

func (s *server) resolve(ctx context.Context, ss *sdk.ServerSession) place {
	if s.o.Project != "" {
		if fi, err := os.Stat(s.o.Project); err == nil && fi.IsDir() {
			dir, err := filepath.Abs(s.o.Project)
			if err == nil {
				return s.keyed(ctx, dir)
			}
		}
		return place{key: s.o.Project}
	}
	dir := s.o.Dir
	if root := s.firstRoot(ctx, ss); root != "" {
		dir = root
	}
	return s.keyed(ctx, dir)
}

// keyed is the project of dir as opencode keys it: its repository's project id, from the
// top folder of its checkout (the project's folder, which thatch memories shows), else dir.
func (s *server) keyed(ctx context.Context, dir string) place {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key, top, err := memory.ProjectKeyOf(gctx, dir)
	if err != nil {
		// As opencode does when git fails: the directory is the project.
		s.o.Log.Warn("could not key the project by its git history; its directory keys it", "dir", dir, "err", err)
	}
	return place{key: key, dir: top}
}

// firstRoot is the folder of the client's first file:// root, "" when it declares no roots,
// has none, or does not list them within RootsTimeout.
func (s *server) firstRoot(ctx context.Context, ss *sdk.ServerSession) string {
	if ss == nil {
		return ""
	}
	// A client that did not say it has roots is not asked: it would leave the request
	// unanswered until RootsTimeout, and the first tool call with it.
	if p := ss.InitializeParams(); p == nil || p.Capabilities == nil || p.Capabilities.RootsV2 == nil {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, s.o.RootsTimeout)
	defer cancel()
	res, err := ss.ListRoots(rctx, nil)
	if err != nil {
		s.o.Log.Debug("the client listed no roots; the working directory is the project", "err", err)
		return ""
	}
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err == nil && u.Scheme == "file" && u.Path != "" {
			return filepath.FromSlash(u.Path)
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

// tagsSchema says what tags may be (§6): at most 8, each 1 to 32 characters.
func tagsSchema(sc *jsonschema.Schema) {
	sc.MaxItems = ptr(memory.MaxTags)
	sc.Items.MinLength, sc.Items.MaxLength = ptr(1), ptr(memory.MaxTag)
}

// atLeast is a handler that passes on records of min or above only.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

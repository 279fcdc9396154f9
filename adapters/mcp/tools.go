package mcp

// The memory tools' arguments (protocol §6), whose JSON schemas the server publishes, and
// the metadata of their answers, which it returns as structured content with the model's
// text beside it (text).

type searchArgs struct {
	Query string   `json:"query" jsonschema:"the words to look for, in any order"`
	Limit int      `json:"limit,omitempty" jsonschema:"how many memories at most: 1 to 50 (default 10)"`
	Kinds []string `json:"kinds,omitempty" jsonschema:"only memories of these kinds"`
}

type searchMeta struct {
	Text string   `json:"text" jsonschema:"the answer for the model, as the text content says it: the memories found, one line each"`
	IDs  []string `json:"ids" jsonschema:"the ids of the memories found, best first"`
}

type rememberArgs struct {
	Content string   `json:"content" jsonschema:"what to remember: 1 to 2000 characters, one thing, said so that a later session understands it alone"`
	Kind    string   `json:"kind,omitempty" jsonschema:"what it is (default fact)"`
	Tags    []string `json:"tags,omitempty" jsonschema:"at most 8 tags of 1 to 32 characters"`
	Branch  string   `json:"branch,omitempty" jsonschema:"scopes the memory to a git branch: its name, or current for the branch checked out"`
}

type rememberMeta struct {
	Text    string    `json:"text" jsonschema:"the answer for the model, as the text content says it"`
	ID      string    `json:"id" jsonschema:"the memory's id: the new one, or the one that already said the same"`
	Created bool      `json:"created" jsonschema:"false when a memory of the project already said the same"`
	Similar []similar `json:"similar" jsonschema:"up to 5 other memories of the project that look alike, best first"`
}

type similar struct {
	ID    string  `json:"id"`
	Score float64 `json:"score"`
}

type updateArgs struct {
	ID           string    `json:"id" jsonschema:"the memory's id, mem_…"`
	Content      *string   `json:"content,omitempty" jsonschema:"its new content"`
	Kind         *string   `json:"kind,omitempty" jsonschema:"its new kind"`
	Tags         *[]string `json:"tags,omitempty" jsonschema:"its new tags"`
	DistinctFrom string    `json:"distinctFrom,omitempty" jsonschema:"alone with id: another memory that looks alike but says something else; the pair is not named again"`
	ProjectWide  bool      `json:"projectWide,omitempty" jsonschema:"drops the memory's branch scope: it holds for the whole project"`
}

type updateMeta struct {
	Text         string `json:"text" jsonschema:"the answer for the model, as the text content says it"`
	ID           string `json:"id"`
	DistinctFrom string `json:"distinctFrom,omitempty"`
}

type forgetArgs struct {
	ID     string `json:"id" jsonschema:"the memory's id, mem_…"`
	Reason string `json:"reason,omitempty" jsonschema:"why it is forgotten"`
}

type forgetMeta struct {
	Text string `json:"text" jsonschema:"the answer for the model, as the text content says it"`
	ID   string `json:"id"`
}

// texted is a structured answer that carries the model's text too: Claude Code shows its
// model a tool's structured content instead of its text content when there is one
// (docs/claude-code.md), so the text content's lines are in the structured content as
// well, and a client that shows either shows them.
type texted interface{ setText(string) }

func (m *searchMeta) setText(s string)   { m.Text = s }
func (m *rememberMeta) setText(s string) { m.Text = s }
func (m *updateMeta) setText(s string)   { m.Text = s }
func (m *forgetMeta) setText(s string)   { m.Text = s }

// The extraction tools (protocol §3), offered to an extraction child only.

type payloadArgs struct{}

type doneArgs struct {
	New     int `json:"new" jsonschema:"memories written"`
	Updated int `json:"updated" jsonschema:"memories updated"`
	Deleted int `json:"deleted" jsonschema:"memories forgotten"`
}

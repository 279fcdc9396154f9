package scenario

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Epoch is the scenario clock's start.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Harness drives runtime.Step from script commands. It numbers the host calls it sees so
// that a later "result N" can answer call #N.
type Harness struct {
	Rules runtime.Rules
	State *runtime.State
	Now   time.Time

	// AfterStep, when set, sees every input and the effects Step returned for it: the
	// journal tests commit them and compare the reloaded state.
	AfterStep func(in runtime.Input, fx *runtime.Effects)

	seq    uint64
	events int
	calls  []runtime.Call
	bodies map[string]runtime.Body // root/id → body, standing in for the journal
}

// New returns a harness over an empty state.
func New() *Harness {
	return &Harness{Rules: runtime.DefaultRules, State: runtime.NewState(), Now: Epoch, bodies: map[string]runtime.Body{}}
}

// Exec runs one command and returns its output.
func (h *Harness) Exec(c Cmd) string {
	switch c.Name {
	case "event": // an event that does not decode is stepped as the driver steps it: a Rejection
		return h.step(h.event(c))
	case "tool":
		return h.step(runtime.ToolCall{Name: c.Keys[0], SessionID: c.Args["session"], Args: json.RawMessage(c.Args["args"])})
	case "wrote": // wrote SESSION new=N updated=N deleted=N: the store counted a child's writes
		in := runtime.MemoryWrote{SessionID: c.Keys[0]}
		in.New, _ = strconv.ParseInt(c.Args["new"], 10, 64)
		in.Updated, _ = strconv.ParseInt(c.Args["updated"], 10, 64)
		in.Deleted, _ = strconv.ParseInt(c.Args["deleted"], 10, 64)
		return h.step(in)
	case "result":
		n, err := strconv.Atoi(c.Keys[0])
		if err != nil || n < 1 || n > len(h.calls) {
			return fmt.Sprintf("error: no call #%s", c.Keys[0])
		}
		return h.step(h.result(h.calls[n-1], c))
	case "rules":
		if v, ok := c.Args["output-max"]; ok {
			h.Rules.OutputMax, _ = strconv.Atoi(v)
		}
		if v, ok := c.Args["stale"]; ok {
			h.Rules.StaleAccepted, _ = time.ParseDuration(v)
		}
		if v, ok := c.Args["ttl"]; ok {
			h.Rules.TTL, _ = time.ParseDuration(v)
		}
		if v, ok := c.Args["payload-chars"]; ok {
			h.Rules.PayloadChars, _ = strconv.Atoi(v)
		}
		if v, ok := c.Args["daily-tokens"]; ok {
			h.Rules.DailyTokens, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := c.Args["extract-model"]; ok {
			h.Rules.ExtractModel = v
		}
		return ""
	case "show":
		n, err := strconv.Atoi(c.Keys[0])
		if err != nil || n < 1 || n > len(h.calls) {
			return fmt.Sprintf("error: no call #%s", c.Keys[0])
		}
		return indent(h.calls[n-1].Text)
	case "advance":
		d, err := time.ParseDuration(c.Keys[0])
		if err != nil {
			return "error: " + err.Error()
		}
		h.Now = h.Now.Add(d)
		return ""
	case "tick":
		// tick gone=/a,/b: every tracked directory exists but those listed.
		exists := map[string]bool{}
		for _, d := range runtime.Directories(h.State) {
			exists[d] = true
		}
		for _, d := range splitList(c.Args["gone"]) {
			exists[d] = false
		}
		return h.step(runtime.Tick{Exists: exists})
	case "retry": // the retry timer: the failed extractions due start (retry.go)
		return h.step(runtime.RetryTick{})
	case "strand":
		// strand host=h1 rows="id|dir|title|parent|project;..." gone=/a,/b worktrees=p1:/w [nomove]
		var rows []runtime.SessionInfo
		for _, row := range strings.Split(c.Args["rows"], ";") {
			f := append(strings.Split(row, "|"), "", "", "", "", "")
			rows = append(rows, runtime.SessionInfo{ID: f[0], Directory: f[1], Title: f[2], ParentID: f[3], ProjectID: f[4]})
		}
		gone := map[string]bool{}
		for _, d := range splitList(c.Args["gone"]) {
			gone[d] = true
		}
		worktrees := map[string]string{}
		for _, kv := range splitList(c.Args["worktrees"]) {
			k, v, _ := strings.Cut(kv, ":")
			worktrees[k] = v
		}
		_, nomove := c.Args["nomove"]
		plan := runtime.PlanStrandActions(rows, func(d string) bool { return !gone[d] }, worktrees, !nomove)
		var out []string
		for _, a := range plan {
			out = append(out, fmt.Sprintf("plan %s %s %s: %s", a.Kind, a.SessionID, a.Directory, a.Reason))
		}
		if r := h.step(runtime.SweepApply{Host: c.Args["host"], Actions: plan}); r != "" {
			out = append(out, r)
		}
		return strings.Join(out, "\n")
	case "state":
		return Dump(h.State, h.Now)
	case "status": // the status method's figures that the state decides
		v := runtime.Summary(h.State, 0)
		line := fmt.Sprintf("status hosts=%d sessions=%d pending=%d accepted=%d hostsMissingTools=%s",
			v.Hosts, v.Sessions, v.Pending, v.Accepted, strings.Join(v.HostsMissingTools, ","))
		if f := v.LastExtractionFailure; f != nil {
			line += fmt.Sprintf(" lastFailure=@+%s succeededSince=%t", f.At.Sub(Epoch), f.SucceededSince)
		}
		if at := v.LastExtractionSuccess; at != nil {
			line += fmt.Sprintf(" lastSuccess=@+%s", at.Sub(Epoch))
		}
		return line
	}
	return "error: unknown command " + c.Name
}

func (h *Harness) step(in runtime.Input) string {
	fx := h.Rules.Step(h.State, in, h.Now)
	if h.AfterStep != nil {
		h.AfterStep(in, fx)
	}
	var out []string
	for _, op := range fx.Entries {
		switch op.Kind {
		case runtime.EntryInsert:
			h.bodies[op.Root+"/"+op.ID] = *op.Body
		case runtime.EntryMove:
			from := op.From + "/" + cmp.Or(op.FromID, op.ID)
			h.bodies[op.Root+"/"+op.ID] = h.bodies[from]
			delete(h.bodies, from)
		}
	}
	if r := fx.Reply; r != nil {
		out = append(out, h.reply(r))
	}
	for _, c := range fx.Calls {
		h.calls = append(h.calls, c)
		out = append(out, fmt.Sprintf("call #%d %s", len(h.calls), FormatCall(c)))
	}
	for _, r := range fx.Ledger {
		out = append(out, fmt.Sprintf("ledger %s root=%s project=%s day=%s entries=%d in=%d out=%d cost=%g model=%s turns=%d",
			r.Child, r.Root, r.Project, r.Day, r.Entries, r.TokensIn, r.TokensOut, r.USD, r.Model, r.Turns))
	}
	for _, n := range fx.Notes {
		line := fmt.Sprintf("note %s: %s", strings.ToLower(n.Level.String()), n.Msg)
		for i := 0; i+1 < len(n.Attrs); i += 2 {
			line += fmt.Sprintf(" %v=%v", n.Attrs[i], n.Attrs[i+1])
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func (h *Harness) reply(r *runtime.Reply) string {
	if r.Err != nil {
		return "reply error " + r.Err.Name + ": " + r.Err.Message
	}
	if c := r.Caller; c != nil && r.Payload == nil {
		s := fmt.Sprintf("reply caller session=%s kind=%s root=%s project=%s", c.SessionID, c.Kind, c.Root, c.Project)
		if c.Reminder != "" {
			s += "\n" + indent(c.Reminder)
		}
		return s
	}
	meta, _ := json.Marshal(r.Metadata)
	s := "reply " + string(meta)
	if p := r.Payload; p != nil {
		root := h.State.Sessions[p.Root]
		var entries []runtime.PayloadEntry
		for _, id := range root.Claimed(p.Claimant) {
			entries = append(entries, runtime.PayloadEntry{ID: id, Body: h.bodies[p.Root+"/"+id]})
		}
		s += "\n" + indent(runtime.FormatPayload(runtime.Payload{Root: p.Root, Entries: entries, Remaining: p.Remaining, Again: p.Again}, nil))
	} else if r.Output != "" {
		s += "\n" + indent(r.Output)
	}
	return s
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l == "" {
			lines[i] = "  ."
		} else {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n")
}

// FormatCall renders a call on one line, fields in a fixed order.
func FormatCall(c runtime.Call) string {
	parts := []string{c.Host, string(c.Op)}
	add := func(k, v string) {
		if v != "" {
			if strings.ContainsAny(v, " \n") {
				v = strconv.Quote(firstLine(v))
			}
			parts = append(parts, k+"="+v)
		}
	}
	add("session", c.SessionID)
	add("title", c.Title)
	add("text", c.Text)
	add("variant", c.Variant)
	add("dir", c.Directory)
	add("wrapup", string(c.WrapUp))
	if c.NoReply {
		parts = append(parts, "noReply")
	}
	if c.Synthetic {
		parts = append(parts, "synthetic")
	}
	add("purpose", string(c.Purpose))
	add("project", c.Project)
	add("model", c.Model)
	return strings.Join(parts, " ")
}

func firstLine(s string) string {
	l, rest, _ := strings.Cut(s, "\n")
	if rest != "" {
		return l + "…"
	}
	return l
}

// event builds an event from a command, event TYPE key=value..., or the Rejection of a
// body that does not decode (body=...).
func (h *Harness) event(c Cmd) runtime.Input {
	a := c.Args
	get := func(k, def string) string {
		if v, ok := a[k]; ok {
			return v
		}
		return def
	}
	typ := c.Keys[0]
	h.events++
	id := get("id", fmt.Sprintf("evt_%03d", h.events))
	var seq uint64
	if s, ok := a["seq"]; ok {
		seq, _ = strconv.ParseUint(s, 10, 64)
	} else {
		h.seq++
		seq = h.seq
	}
	props := map[string]any{}
	sid := get("session", "")
	if sid != "" {
		props["sessionID"] = sid
	}
	switch typ {
	case protocol.EventHostHello:
		caps := map[string]bool{}
		for _, k := range strings.Split(get("caps", "tui,compact,move,list"), ",") {
			if k != "" {
				caps[k] = true
			}
		}
		props = map[string]any{"hostID": get("host", "h1"), "api": get("api", "v1"), "version": "1.0",
			"bootID": get("boot", "b1"), "directory": get("dir", "/w"), "worktree": get("worktree", "/w"),
			"projectID": "p1", "capabilities": caps, "resumed": splitList(get("resumed", ""))}
		if m := get("small", ""); m != "" {
			props["smallModel"] = m
		}
		if m := get("missing", ""); m != "" {
			props["missingTools"] = splitList(m)
		}
	case protocol.EventHostGoodbye:
		props = map[string]any{"hostID": get("host", "h1"), "bootID": get("boot", "b1")}
	case protocol.EventSessionCreated, protocol.EventSessionUpdated, protocol.EventSessionDeleted:
		info := map[string]any{"id": sid, "title": get("title", "t"), "directory": get("dir", "/w")}
		if p := get("parent", ""); p != "" {
			info["parentID"] = p
		}
		if p := get("project", ""); p != "" {
			info["projectID"] = p
		}
		props["info"] = info
	case protocol.EventSessionStatus:
		props["status"] = map[string]any{"type": get("status", "idle")}
	case protocol.EventSessionError:
		if n := get("error", ""); n != "" {
			props["error"] = map[string]any{"name": n, "data": map[string]any{"message": "scripted"}}
		}
	case protocol.EventToolExecuteAfter:
		args := json.RawMessage(get("args", `{"command":"ls"}`))
		props["callID"], props["tool"], props["args"] = get("call", "c1"), get("tool", "bash"), args
		props["title"], props["output"], props["metadata"] = get("title", ""), get("output", "out"), map[string]any{}
	case protocol.EventCommandExecuteBefore:
		props["command"], props["arguments"] = get("command", "thatch/compact"), get("arguments", "")
	case protocol.EventCommandExecuted:
		props["name"], props["arguments"], props["messageID"] = get("command", "thatch/compact"), get("arguments", ""), "msg_1"
	}
	body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "properties": props})
	if raw, ok := a["body"]; ok {
		body = []byte(raw)
	}
	subject := "opencode." + get("host", "h1") + ".event." + typ
	ev, err := runtime.DecodeEvent("opencode", subject, body)
	if err != nil {
		return runtime.Reject(seq, subject, body, err)
	}
	ev.Seq = seq
	if s, ok := a["hostseq"]; ok {
		ev.HostSeq, _ = strconv.ParseInt(s, 10, 64)
	}
	return ev
}

func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// result answers call c: result N [session=ID] [err=Name [msg=message]] [noresponder] [text=...] [sessions=id|dir|title|parent;...]
func (h *Harness) result(c runtime.Call, cmd Cmd) runtime.Result {
	a := cmd.Args
	r := runtime.Result{Call: c}
	if _, ok := a["noresponder"]; ok {
		r.Err = &runtime.HostError{Name: protocol.NoResponder, Message: "no responder", NoResponder: true}
	} else if e, ok := a["err"]; ok {
		r.Err = &runtime.HostError{Name: e, Message: "scripted"}
		if m, ok := a["msg"]; ok {
			r.Err.Message = m
		}
	}
	if s, ok := a["session"]; ok {
		r.Session = &runtime.SessionInfo{ID: s, ParentID: c.SessionID, Title: c.Title, Directory: "/w"}
	}
	if t, ok := a["text"]; ok {
		m := runtime.Message{Parts: []runtime.Part{{Type: "text", Text: strings.ReplaceAll(t, `\n`, "\n")}}}
		m.Info.ID, m.Info.Role = "msg_1", "assistant"
		r.Messages = []runtime.Message{m}
	}
	// tokens=IN/OUT[,IN/OUT…] cost=USD model=p/m: the assistant turns of an extraction
	// child, each with those tokens and the cost split evenly.
	if t, ok := a["tokens"]; ok {
		turns := strings.Split(t, ",")
		cost, _ := strconv.ParseFloat(a["cost"], 64)
		provider, model, _ := strings.Cut(a["model"], "/")
		for i, turn := range turns {
			in, out, _ := strings.Cut(turn, "/")
			m := runtime.Message{}
			m.Info.ID, m.Info.Role, m.Info.ProviderID, m.Info.ModelID = fmt.Sprintf("msg_%d", i+1), "assistant", provider, model
			m.Info.Tokens = &runtime.Tokens{}
			m.Info.Tokens.Input, _ = strconv.ParseInt(in, 10, 64)
			m.Info.Tokens.Output, _ = strconv.ParseInt(out, 10, 64)
			c := cost / float64(len(turns))
			m.Info.Cost = &c
			r.Messages = append(r.Messages, m)
		}
	}
	if s, ok := a["sessions"]; ok {
		for _, row := range strings.Split(s, ";") {
			f := strings.Split(row, "|")
			for len(f) < 4 {
				f = append(f, "")
			}
			r.Sessions = append(r.Sessions, runtime.SessionInfo{ID: f[0], Directory: f[1], Title: f[2], ParentID: f[3]})
		}
	}
	return r
}

// Dump renders s in a stable text form.
func Dump(s *runtime.State, now time.Time) string {
	var out []string
	c := s.Counters
	counters := fmt.Sprintf("counters applied=%d rejected=%d gaps=%d stale=%d healed=%d swept=%d",
		c.Applied, c.Rejected, c.Gaps, c.StaleRequeued, c.Healed, c.Swept)
	if c.Redacted > 0 {
		counters += fmt.Sprintf(" redacted=%d", c.Redacted)
	}
	if c.Day != "" {
		counters += fmt.Sprintf(" day=%s tokens=%d", c.Day, c.DayTokens)
	}
	if c.Warned != "" {
		counters += " warned=" + c.Warned
	}
	if c.Trivial > 0 {
		counters += fmt.Sprintf(" trivial=%d", c.Trivial)
	}
	out = append(out, counters)
	hosts := make([]string, 0, len(s.Hosts))
	for id := range s.Hosts {
		hosts = append(hosts, id)
	}
	sort.Strings(hosts)
	for _, id := range hosts {
		ho := s.Hosts[id]
		line := fmt.Sprintf("host %s %s boot=%s seq=%d", ho.ID, ho.API, ho.BootID, ho.Seq)
		if ho.Online {
			line += " online"
		}
		if len(ho.Resumed) > 0 {
			line += " resumed=" + strings.Join(ho.Resumed, ",")
		}
		if len(ho.MissingTools) > 0 {
			line += " missing=" + strings.Join(ho.MissingTools, ",")
		}
		if ho.ToolsWarned {
			line += " tools-warned"
		}
		out = append(out, line)
	}
	ids := make([]string, 0, len(s.Sessions))
	for id := range s.Sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		out = append(out, dumpSession(s.Sessions[id])...)
	}
	return strings.Join(out, "\n")
}

func dumpSession(x *runtime.Session) []string {
	line := fmt.Sprintf("session %s %s %s host=%s dir=%s title=%q", x.ID, x.Kind, x.Status, x.HostID, x.Directory, x.Title)
	if x.ParentID != "" {
		line += " parent=" + x.ParentID
	}
	flags := []struct {
		on   bool
		name string
	}{{x.Reminded, "reminded"}, {x.Extracting, "extracting"}, {x.Compacting, "compacting"}, {x.Resolving, "resolving"}, {x.Exited, "exited"}}
	for _, f := range flags {
		if f.on {
			line += " " + f.name
		}
	}
	if x.Child != "" {
		line += " child=" + x.Child
	}
	if x.WrapUp != runtime.WrapNone {
		line += " wrapup=" + string(x.WrapUp)
	}
	if x.Resolved != runtime.WrapNone {
		line += " resolved=" + string(x.Resolved)
	}
	if r := x.Refused; r != nil {
		line += fmt.Sprintf(" refused=%s@+%s", r.Command, r.At.Sub(Epoch))
	}
	if x.Failed > 0 {
		line += fmt.Sprintf(" failed=%d", x.Failed)
	}
	if x.RetryAt != 0 {
		line += fmt.Sprintf(" retry=@+%s", time.UnixMilli(x.RetryAt).Sub(Epoch))
	}
	if x.Metrics.Total() > 0 {
		line += fmt.Sprintf(" metrics=%d/%d/%d", x.Metrics.New, x.Metrics.Updated, x.Metrics.Deleted)
	}
	if x.WroteThrough {
		line += fmt.Sprintf(" wrote=%d/%d/%d", x.Wrote.New, x.Wrote.Updated, x.Wrote.Deleted)
	}
	if len(x.Snapshot) > 0 {
		line += " snapshot=" + strings.Join(x.Snapshot, ",")
	}
	lines := []string{line}
	for _, e := range x.Entries {
		l := fmt.Sprintf("  entry %s %s pending", e.ID, e.Tool())
		if e.Accepted() {
			l = fmt.Sprintf("  entry %s %s accepted by=%s at=+%s", e.ID, e.Tool(), e.Claimant(), time.UnixMilli(e.ClaimedAt()).Sub(Epoch))
		}
		if e.Trivial() {
			l += " trivial"
		}
		lines = append(lines, l)
	}
	return lines
}

// Scripts lists the golden scripts under dir.
func Scripts(dir string) []string {
	out, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	slices.Sort(out)
	return out
}

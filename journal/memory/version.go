package memory

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Team memory (protocol §9): the versions of a shared project's memories that travel between
// teammates' thatches, their hybrid logical clock and the decision of which version a
// memory holds. Everything in this file is pure: no I/O, no clock of its own (callers pass
// now), so every machine decides alike. docs/protocol.md ("Team memory wire format") is the
// wire format this implements; docs/team.md says why.

// VersionFormat is the record format this build writes and reads. A record of a greater
// format is refused with ErrNewerFormat and kept for a later build.
const VersionFormat = 1

// readFormat is the greatest format DecodeVersion reads: VersionFormat (a variable so a
// test can play a later build).
var readFormat = VersionFormat

// MaxRecord is the largest record, in bytes, a thatch sends or accepts: a memory at every
// limit of §6, each character escaped by JSON, fits.
const MaxRecord = 64 << 10

// MaxFuture is how far ahead of the receiver's clock a version's clock may be.
const MaxFuture = 24 * time.Hour

// Clock is a hybrid logical clock: Wall is unix milliseconds, Logical orders the versions of
// one millisecond (and those made after seeing a clock ahead of the local one).
type Clock struct {
	Wall    int64  `json:"wall"`
	Logical uint32 `json:"logical"`
}

// Tick is the clock of a local change made at now (unix ms), after c.
func (c Clock) Tick(now int64) Clock {
	if now > c.Wall {
		return Clock{Wall: now}
	}
	return Clock{Wall: c.Wall, Logical: c.Logical + 1}
}

// Receive is the clock after c saw r at now (unix ms): later than both.
func (c Clock) Receive(r Clock, now int64) Clock {
	wall := max(c.Wall, r.Wall, now)
	switch {
	case wall == c.Wall && wall == r.Wall:
		return Clock{Wall: wall, Logical: max(c.Logical, r.Logical) + 1}
	case wall == c.Wall:
		return Clock{Wall: wall, Logical: c.Logical + 1}
	case wall == r.Wall:
		return Clock{Wall: wall, Logical: r.Logical + 1}
	}
	return Clock{Wall: wall}
}

// Compare orders two clocks: -1, 0 or +1.
func (c Clock) Compare(o Clock) int {
	return cmp.Or(cmp.Compare(c.Wall, o.Wall), cmp.Compare(c.Logical, o.Logical))
}

// Version is one version of a memory of a shared project, as it travels (the record).
type Version struct {
	Format    int       `json:"format"`
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Branch    string    `json:"branch"`
	Kind      string    `json:"kind"`
	Content   string    `json:"content"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Forgotten bool      `json:"forgotten"`
	Reason    string    `json:"reason,omitempty"`
	Op        string    `json:"op"`
	Author    string    `json:"author"`
	HLC       Clock     `json:"hlc"`
	Node      string    `json:"node"`
	// Base is the clock of the version the change was made on (absent for a creation, a
	// share or a resend): a held version later than it is one the author had not seen,
	// which the change, if it wins, supersedes as a conflict rather than as an edit of it.
	Base *Clock `json:"base,omitempty"`
}

// The ops a version may name; they label history only.
var versionOps = []string{"create", "update", "forget", "restore", "share", "resend", "import"}

// Key is the version's id: the memory, the clock and the node. It is the Nats-Msg-Id of its
// message and the key of the applied-versions record.
func (v Version) Key() string {
	return v.ID + ":" + strconv.FormatInt(v.HLC.Wall, 10) + "." + strconv.FormatUint(uint64(v.HLC.Logical), 10) + ":" + v.Node
}

// CompareVersions orders two versions of one memory by (clock, author, node): the greater
// wins everywhere. 0 is the same version.
func CompareVersions(a, b Version) int {
	return cmp.Or(a.HLC.Compare(b.HLC), strings.Compare(a.Author, b.Author), strings.Compare(a.Node, b.Node))
}

// Encode is the version's record.
func (v Version) Encode() []byte {
	v.Format = VersionFormat
	if v.Tags == nil {
		v.Tags = []string{}
	}
	data, _ := json.Marshal(v) // a Version always marshals
	return data
}

// Why a record is refused; the kind is the label of the rejected count and of the
// dead-letter row.
const (
	RejectMalformed = "malformed"
	RejectOversized = "oversized"
	RejectProject   = "project"
	RejectFuture    = "future"
	RejectFormat    = "format"
)

// RecordError is a record refused: Kind is one of the Reject constants.
type RecordError struct {
	Kind   string
	Detail string
	Format int // RejectFormat: the record's format
}

func (e *RecordError) Error() string { return e.Kind + ": " + e.Detail }

// ErrNewerFormat is matched (errors.Is) by a RecordError of kind RejectFormat.
var ErrNewerFormat = errors.New("record of a newer format")

func (e *RecordError) Is(target error) bool {
	return target == ErrNewerFormat && e.Kind == RejectFormat
}

var (
	projectToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	nodePattern  = regexp.MustCompile(`^n_[0-9a-f]{16}$`)
)

// ShareableProject says why a project key cannot be shared, or nil: the key must be one
// NATS subject token (opencode's projectID is 40 hex digits, or "global"); a directory key
// names a folder of one machine.
func ShareableProject(project string) error {
	switch {
	case project == "":
		return fmt.Errorf("%w: no project given; give a project key (thatch memories projects lists them)", ErrBadRequest)
	case strings.HasPrefix(project, "/") || strings.Contains(project, `\`):
		return fmt.Errorf("%w: project %q is keyed by a directory, which names a folder of this machine only: a teammate's folder of the same name is another project. Only a project keyed by its host's projectID (a git repository under opencode) can be shared", ErrBadRequest, project)
	case !projectToken.MatchString(project):
		return fmt.Errorf("%w: project %q is not a host's projectID (1 to 128 letters, digits, _ or -), so it cannot name its team subject; only a project keyed by its host's projectID can be shared", ErrBadRequest, project)
	}
	return nil
}

// DecodeVersion reads a record and checks it on its own: size, format, fields and §6's
// limits. A refusal is a *RecordError.
func DecodeVersion(data []byte) (Version, error) {
	if len(data) > MaxRecord {
		return Version{}, &RecordError{Kind: RejectOversized, Detail: fmt.Sprintf("%d bytes, over %d", len(data), MaxRecord)}
	}
	var head struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Version{}, &RecordError{Kind: RejectMalformed, Detail: "not a JSON object: " + err.Error()}
	}
	if head.Format == nil || *head.Format < 1 {
		return Version{}, &RecordError{Kind: RejectMalformed, Detail: "no format number"}
	}
	if *head.Format > readFormat {
		return Version{}, &RecordError{Kind: RejectFormat, Format: *head.Format,
			Detail: fmt.Sprintf("format %d, this build reads %d: upgrade thatch to apply it", *head.Format, readFormat)}
	}
	var v Version
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil {
		return Version{}, &RecordError{Kind: RejectMalformed, Detail: err.Error()}
	}
	if dec.More() {
		return Version{}, &RecordError{Kind: RejectMalformed, Detail: "data after the record"}
	}
	if err := v.check(); err != nil {
		return Version{}, err
	}
	return v, nil
}

func (v Version) check() error {
	bad := func(format string, args ...any) error {
		return &RecordError{Kind: RejectMalformed, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case !idPattern.MatchString(v.ID):
		return bad("id %q is not mem_ and 20 hex digits", v.ID)
	case !projectToken.MatchString(v.Project):
		return bad("project %q is not a shareable key", v.Project)
	case !slices.Contains(Kinds, v.Kind):
		return bad("kind %q is unknown", v.Kind)
	case !slices.Contains(versionOps, v.Op):
		return bad("op %q is unknown", v.Op)
	case v.Author == "" || utf8.RuneCountInString(v.Author) > 200 || !utf8.ValidString(v.Author):
		return bad("author is empty, too long or not UTF-8")
	case !nodePattern.MatchString(v.Node):
		return bad("node %q is not n_ and 16 hex digits", v.Node)
	case v.HLC.Wall <= 0:
		return bad("no clock")
	case v.CreatedAt.IsZero() || v.UpdatedAt.IsZero():
		return bad("no times")
	case utf8.RuneCountInString(v.Branch) > maxBranch || !utf8.ValidString(v.Branch):
		return bad("branch too long")
	case len(v.Tags) > MaxTags:
		return bad("%d tags, at most %d", len(v.Tags), MaxTags)
	case utf8.RuneCountInString(v.Reason) > 500 || !utf8.ValidString(v.Reason):
		return bad("reason too long")
	}
	content := strings.TrimSpace(v.Content)
	if content == "" || !utf8.ValidString(content) || strings.ContainsRune(content, 0) {
		return bad("content is empty or not UTF-8")
	}
	if n := utf8.RuneCountInString(content); n > MaxContent {
		return &RecordError{Kind: RejectOversized, Detail: fmt.Sprintf("content of %d characters, over %d", n, MaxContent)}
	}
	for _, t := range v.Tags {
		t = strings.TrimSpace(t)
		if t == "" || utf8.RuneCountInString(t) > MaxTag || !utf8.ValidString(t) {
			return bad("tag %q is empty or too long", t)
		}
	}
	return nil
}

// CheckVersion checks a decoded version against where it came from and the receiver's
// clock: the subject's project and memory id, and a clock at most MaxFuture ahead of now.
func CheckVersion(v Version, project, id string, now time.Time) error {
	if v.Project != project {
		return &RecordError{Kind: RejectProject, Detail: fmt.Sprintf("record of project %q on the subject of project %q", v.Project, project)}
	}
	if id != "" && v.ID != id {
		return &RecordError{Kind: RejectProject, Detail: fmt.Sprintf("record of memory %s on the subject of memory %s", v.ID, id)}
	}
	if v.HLC.Wall > now.Add(MaxFuture).UnixMilli() {
		return &RecordError{Kind: RejectFuture, Detail: fmt.Sprintf("clock %s is more than %v ahead of this machine's", time.UnixMilli(v.HLC.Wall).UTC().Format(time.RFC3339), MaxFuture)}
	}
	return nil
}

// Decision is what applying a received version does.
type Decision struct {
	// Same: the memory holds this very version; nothing changes.
	Same bool
	// Take: the version becomes the memory's state. Otherwise it lost, and only the
	// memory's history records it (superseded).
	Take bool
	// DuplicateOf (with Take, a live version): the memory is stored forgotten as a
	// duplicate of this id, which is live with the same content and smaller.
	DuplicateOf string
	// ForgetDuplicate (with Take, a live version): this other live memory says the same and
	// has the greater id: it is forgotten as a duplicate of the version's memory.
	ForgetDuplicate string
}

// Decide is the decision for the received version in, given the version held of its memory
// (nil when unknown) and the id of another live memory of its project with the same
// normalized content ("" when none). The later version by CompareVersions wins; of two live
// memories saying the same, the smaller id stays.
func Decide(held *Version, in Version, sameContent string) Decision {
	if held != nil {
		switch c := CompareVersions(in, *held); {
		case c == 0:
			return Decision{Same: true}
		case c < 0:
			return Decision{}
		}
	}
	d := Decision{Take: true}
	if !in.Forgotten && sameContent != "" && sameContent != in.ID {
		if sameContent < in.ID {
			d.DuplicateOf = sameContent
		} else {
			d.ForgetDuplicate = sameContent
		}
	}
	return d
}

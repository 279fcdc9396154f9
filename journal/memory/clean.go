package memory

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Validation. Each message says what is wrong and what to do, for a model to act on.

func (s *Store) cleanContent(v string) (string, error) {
	// NUL and invalid UTF-8 would make SQLite count characters differently from Go, and a
	// NUL ends a line on the model's side anyway.
	v = strings.TrimSpace(strings.ToValidUTF8(strings.ReplaceAll(s.redact(v), "\x00", ""), "\uFFFD"))
	if v == "" {
		return "", fmt.Errorf("%w: content is empty; write what to remember as one or more sentences", ErrBadRequest)
	}
	if n := utf8.RuneCountInString(v); n > MaxContent {
		return "", fmt.Errorf("%w: content is %d characters, over the limit of %d; shorten it or split it into several memories", ErrBadRequest, n, MaxContent)
	}
	return v, nil
}

// cleanKind checks a kind; "" is fact.
func cleanKind(v string) (string, error) {
	if v == "" {
		return Kinds[0], nil
	}
	if !slices.Contains(Kinds, v) {
		return "", fmt.Errorf("%w: kind %q is unknown; use one of %s", ErrBadRequest, v, strings.Join(Kinds, ", "))
	}
	return v, nil
}

func (s *Store) cleanTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, fmt.Errorf("%w: %d tags, at most %d are allowed; keep the most telling ones", ErrBadRequest, len(tags), MaxTags)
	}
	out := make([]string, 0, len(tags))
	for i, t := range tags {
		t = strings.TrimSpace(s.redact(t))
		if t == "" {
			return nil, fmt.Errorf("%w: tag %d is empty; drop it or give it a word", ErrBadRequest, i+1)
		}
		if n := utf8.RuneCountInString(t); n > MaxTag {
			return nil, fmt.Errorf("%w: tag %q is %d characters, over the limit of %d; shorten it", ErrBadRequest, t, n, MaxTag)
		}
		out = append(out, t)
	}
	return out, nil
}

func (s *Store) cleanBranch(v string) (string, error) {
	v = strings.TrimSpace(s.redact(v)) // a branch name is text a model wrote: rule 13 holds
	if n := utf8.RuneCountInString(v); n > maxBranch {
		return "", fmt.Errorf("%w: branch is %d characters, over the limit of %d; give the branch name only", ErrBadRequest, n, maxBranch)
	}
	return v, nil
}

// maxDirectory is the longest directory a memory records, in characters.
const maxDirectory = 4096

// cleanDirectory checks the directory a memory is written from: "" or an absolute path, since
// the branch check looks for its repository on this filesystem.
func cleanDirectory(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if n := utf8.RuneCountInString(v); n > maxDirectory {
		return "", fmt.Errorf("%w: directory is %d characters, over the limit of %d; give the session's directory", ErrBadRequest, n, maxDirectory)
	}
	if !filepath.IsAbs(v) || strings.ContainsRune(v, 0) {
		return "", fmt.Errorf("%w: directory %q is not an absolute path; give the session's full directory, or none", ErrBadRequest, v)
	}
	return filepath.Clean(v), nil
}

var tipPattern = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// cleanTip checks a branch tip: "" or a commit id in hex (SHA-1 or SHA-256, abbreviated or
// not), lower-cased. It goes to git as an argument, so nothing else may pass.
func cleanTip(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v != "" && !tipPattern.MatchString(v) {
		return "", fmt.Errorf("%w: branchTip %q is not a commit id; give the branch's commit in hex, or none", ErrBadRequest, v)
	}
	return v, nil
}

// checkLimit is n, or def when n is 0, refusing anything outside 1..max.
func checkLimit(n, def, max int) (int, error) {
	if n == 0 {
		return def, nil
	}
	if n < 1 || n > max {
		return 0, fmt.Errorf("%w: limit %d is out of range; give 1 to %d, or none for %d", ErrBadRequest, n, max, def)
	}
	return n, nil
}

// normalize is content as compared for exact duplicates: lower-cased, whitespace runs
// collapsed to one space, trimmed.
func normalize(content string) string {
	return strings.Join(strings.Fields(strings.ToLower(content)), " ")
}

// scope is project's token: the prefix of its scoped words in memories_fts (scoped.go), of
// fixed size whatever the project key.
func scope(project string) string {
	sum := sha256.Sum256([]byte(project))
	return "p" + hex.EncodeToString(sum[:8])
}

var idPattern = regexp.MustCompile(`^mem_[0-9a-f]{20}$`)

// newID is mem_ + 12 hex digits of unix milliseconds + 8 random hex digits: ids sort by
// creation and two writers of one millisecond still differ.
func newID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("mem_%012x%s", uint64(now.UnixMilli())&0xffffffffffff, hex.EncodeToString(b[:]))
}

func toMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func toTime(v int64) time.Time {
	return time.UnixMilli(v).UTC()
}

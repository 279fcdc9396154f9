package memory

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Remember adds a memory to c.Project, or answers with the live memory of that project that
// has the same normalized content (Created false).
func (s *Store) Remember(ctx context.Context, c Caller, a RememberArgs, now time.Time) (Remembered, error) {
	if c.Project == "" {
		return Remembered{}, fmt.Errorf("%w: the caller has no project to remember for", ErrBadRequest)
	}
	content, err := s.cleanContent(a.Content)
	if err != nil {
		return Remembered{}, err
	}
	kind, err := cleanKind(a.Kind)
	if err != nil {
		return Remembered{}, err
	}
	tags, err := s.cleanTags(a.Tags)
	if err != nil {
		return Remembered{}, err
	}
	branch, err := s.cleanBranch(a.Branch)
	if err != nil {
		return Remembered{}, err
	}
	directory, err := cleanDirectory(a.Directory)
	if err != nil {
		return Remembered{}, err
	}
	tip, err := cleanTip(a.BranchTip)
	if err != nil {
		return Remembered{}, err
	}
	// The look-alikes are read before the write transaction, so the single writer is not
	// held while they are scored; a memory committed meanwhile is merely not listed (nor
	// paired: FindDuplicates catches what writes miss).
	similar, err := s.similar(ctx, c.Project, content)
	if err != nil {
		return Remembered{}, fmt.Errorf("find similar memories: %w", err)
	}
	var out Remembered
	err = s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := s.repeatedWrite(ctx, tx, c, toolRemember, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := liveByNorm(ctx, tx, c.Project, normalize(content))
		switch {
		case err == nil:
			out = Remembered{Memory: m}
		case errors.Is(err, ErrNotFound):
			at := toTime(toMS(now))
			m = Memory{
				ID: newID(now), Project: c.Project, Branch: branch, Directory: directory, BranchTip: tip,
				Kind: kind, Content: content, Tags: tags,
				CreatedAt: at, UpdatedAt: at, Source: Source{SessionID: c.SessionID, CallID: c.CallID, Host: c.Host, Client: c.Client},
			}
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			if err := audit(ctx, tx, m.ID, now, "create", c, "", ""); err != nil {
				return err
			}
			if err := s.stamp(ctx, tx, m.ID, "create", now); err != nil {
				return err
			}
			m.Author = s.author
			if err := pairUp(ctx, tx, m, similar, now); err != nil {
				return err
			}
			out = Remembered{Memory: m, Created: true}
		default:
			return err
		}
		out.Similar = others(similar, m.ID)
		if err := recordFolder(ctx, tx, c.Project, cmp.Or(c.Directory, directory), now); err != nil {
			return err
		}
		return memo(ctx, tx, c, toolRemember, out, now)
	})
	if err != nil {
		return Remembered{}, wrap("remember", err)
	}
	return out, nil
}

// others is the look-alikes other than id, at most 5, best first.
func others(similar []Similar, id string) []Similar {
	out := []Similar{}
	for _, x := range similar {
		if x.ID != id && len(out) < 5 {
			out = append(out, x)
		}
	}
	return out
}

func insert(ctx context.Context, tx cachedTx, m Memory) error {
	if err := insertRow(ctx, tx, m); err != nil {
		return err
	}
	return countWords(ctx, tx, m.Content, 1)
}

// insertRow is insert without the words table's counts, which the caller keeps.
func insertRow(ctx context.Context, tx cachedTx, m Memory) error {
	tags, _ := json.Marshal(m.Tags)
	var used int64
	if m.UsedAt != nil {
		used = toMS(*m.UsedAt)
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO memories (id, project, scope, branch, directory, branch_tip, kind, content, norm, tags,
			created_at, updated_at, used_at, source_session, source_call, source_host, source_client)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.ID, m.Project, scope(m.Project), m.Branch, m.Directory, m.BranchTip, m.Kind, m.Content, normalize(m.Content), string(tags),
		toMS(m.CreatedAt), toMS(m.UpdatedAt), used, m.Source.SessionID, m.Source.CallID, m.Source.Host, m.Source.Client)
	return err
}

// Update changes a live memory of c.Project.
func (s *Store) Update(ctx context.Context, c Caller, id string, a UpdateArgs, now time.Time) (Changed, error) {
	if a.Content == nil && a.Kind == nil && a.Tags == nil && !a.ProjectWide {
		return Changed{}, fmt.Errorf("%w: nothing to update; give content, kind or tags", ErrBadRequest)
	}
	var content, kind string
	var tags []string
	var err error
	if a.Content != nil {
		if content, err = s.cleanContent(*a.Content); err != nil {
			return Changed{}, err
		}
	}
	if a.Kind != nil {
		if *a.Kind == "" {
			return Changed{}, fmt.Errorf("%w: kind is empty; give one of %s or leave it out", ErrBadRequest, strings.Join(Kinds, ", "))
		}
		if kind, err = cleanKind(*a.Kind); err != nil {
			return Changed{}, err
		}
	}
	if a.Tags != nil {
		if tags, err = s.cleanTags(*a.Tags); err != nil {
			return Changed{}, err
		}
	}
	// The look-alikes of the text the memory will have are read before the write
	// transaction, as Remember does: an update closes the memory's pairs and records those
	// of its new text (a tags or kind update keeps the text it has).
	var text string
	var similar []Similar
	if cur, err := live(ctx, s.r, id, c.Project); err == nil { // else the transaction reports it
		text = cur.Content
		if a.Content != nil {
			text = content
		}
		if similar, err = s.similar(ctx, cur.Project, text); err != nil {
			return Changed{}, fmt.Errorf("update %s: find similar memories: %w", id, err)
		}
	}
	var out Changed
	err = s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := s.repeatedWrite(ctx, tx, c, toolUpdate, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := live(ctx, tx, id, c.Project)
		if err != nil {
			return err
		}
		before := m.Content
		if a.Content != nil {
			other, err := liveByNorm(ctx, tx, m.Project, normalize(content))
			if err == nil && other.ID != m.ID {
				return fmt.Errorf("%w: memory %s already says this; forget one of them", ErrBadRequest, other.ID)
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			m.Content = content
		}
		if a.Kind != nil {
			m.Kind = kind
		}
		if a.Tags != nil {
			m.Tags = tags
		}
		if a.ProjectWide {
			m.Branch, m.BranchTip = "", ""
		}
		m.UpdatedAt = toTime(toMS(now))
		tagsJSON, _ := json.Marshal(m.Tags)
		// The branch verdict goes too: the next branch check judges the memory as it is now.
		_, err = tx.ExecContext(ctx, `UPDATE memories SET content = ?, norm = ?, kind = ?, tags = ?, updated_at = ?, branch = ?, branch_tip = ?, branch_verdict = '' WHERE id = ?`,
			m.Content, normalize(m.Content), m.Kind, string(tagsJSON), toMS(now), m.Branch, m.BranchTip, m.ID)
		if err != nil {
			return err
		}
		if err := closePairs(ctx, tx, m.ID); err != nil {
			return err
		}
		// The look-alikes were found for text; a concurrent update of this memory may have
		// changed it since, and then FindDuplicates pairs the text it has.
		if normalize(m.Content) == normalize(text) {
			if err := pairUp(ctx, tx, m, similar, now); err != nil {
				return err
			}
		}
		if err := countWords(ctx, tx, before, -1); err != nil {
			return err
		}
		if err := countWords(ctx, tx, m.Content, 1); err != nil {
			return err
		}
		if err := audit(ctx, tx, m.ID, now, "update", c, "", before); err != nil {
			return err
		}
		if err := s.stamp(ctx, tx, m.ID, "update", now); err != nil {
			return err
		}
		m.Author = s.author
		if err := recordFolder(ctx, tx, m.Project, c.Directory, now); err != nil {
			return err
		}
		out = Changed{Memory: m}
		return memo(ctx, tx, c, toolUpdate, out, now)
	})
	if err != nil {
		return Changed{}, wrap("update "+id, err)
	}
	return out, nil
}

// Forget takes a live memory out of search, injection and listings; it stays readable by
// Get with its audit trail. c.Project "" (a person) may forget any project's memory.
func (s *Store) Forget(ctx context.Context, c Caller, id, reason string, now time.Time) (Changed, error) {
	var out Changed
	err := s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := s.repeatedWrite(ctx, tx, c, toolForget, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := live(ctx, tx, id, c.Project)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgotten_at = ? WHERE id = ?`, toMS(now), m.ID); err != nil {
			return err
		}
		if err := closePairs(ctx, tx, m.ID); err != nil {
			return err
		}
		if err := countWords(ctx, tx, m.Content, -1); err != nil {
			return err
		}
		if err := audit(ctx, tx, m.ID, now, "forget", c, s.redact(reason), m.Content); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgot_reason = ? WHERE id = ?`, s.redact(reason), m.ID); err != nil {
			return err
		}
		if err := s.stamp(ctx, tx, m.ID, "forget", now); err != nil {
			return err
		}
		m.Author = s.author
		at := toTime(toMS(now))
		m.ForgottenAt = &at
		out = Changed{Memory: m}
		return memo(ctx, tx, c, toolForget, out, now)
	})
	if err != nil {
		return Changed{}, wrap("forget "+id, err)
	}
	return out, nil
}

// wrap says what failed in an unexpected error. The store's own answers, ErrBadRequest and
// ErrNotFound, go out as they are: their message is for a model, and says it all.
func wrap(op string, err error) error {
	if errors.Is(err, ErrBadRequest) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// repeatedWrite is repeated for a write's tool, run in its transaction. A search's answer
// still queued for the writer (used.go) is not in the memo yet, but its callID is taken all
// the same: reusing it for a write is a bad request, never a fresh write.
func (s *Store) repeatedWrite(ctx context.Context, tx queryer, c Caller, tool string, out any) (bool, error) {
	if c.CallID != "" {
		if a, ok := s.marks.queued(c); ok {
			return false, usedFor(c, a.tool)
		}
	}
	return repeated(ctx, tx, c, tool, out)
}

// usedFor is the bad request of a callID that c reuses after a call of tool.
func usedFor(c Caller, tool string) error {
	return fmt.Errorf("%w: callID %s was already used for %s; give each call its own callID", ErrBadRequest, c.CallID, tool)
}

// repeated looks c's callID up in the memo. When the call was answered before, it decodes
// that answer into out and reports true. A callID used for another tool is a bad request.
func repeated(ctx context.Context, tx queryer, c Caller, tool string, out any) (bool, error) {
	if c.CallID == "" {
		return false, nil
	}
	var used, result string
	err := tx.QueryRowContext(ctx, `SELECT tool, result FROM calls WHERE session_id = ? AND call_id = ?`, c.SessionID, c.CallID).Scan(&used, &result)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if used != tool {
		return false, usedFor(c, used)
	}
	return true, json.Unmarshal([]byte(result), out)
}

// memo keeps the answer of c's call, in the transaction of the change it describes.
func memo(ctx context.Context, tx cachedTx, c Caller, tool string, answer any, now time.Time) error {
	if c.CallID == "" {
		return nil
	}
	data, err := json.Marshal(answer)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO calls (session_id, call_id, tool, result, at) VALUES (?, ?, ?, ?, ?)`,
		c.SessionID, c.CallID, tool, string(data), toMS(now))
	return err
}

func audit(ctx context.Context, tx cachedTx, id string, now time.Time, op string, c Caller, reason, before string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO memory_log (memory_id, at, op, session_id, call_id, reason, before) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, toMS(now), op, c.SessionID, c.CallID, reason, before)
	return err
}

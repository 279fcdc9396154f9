package memory

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Import adds memories read from an export, keeping their ids, times and sources. It is
// idempotent: a memory whose id exists, or whose normalized content is already live in its
// project, is skipped; so is a forgotten one. Every memory is validated (and redacted) like
// Remember's arguments before anything is written; one bad memory fails the whole import.
//
// Import records no duplicate pairs: the look-alikes are read outside the write transaction,
// so the memories of one import would never see each other, and scoring thousands of them
// one by one would hold the single writer for seconds. FindDuplicates pairs them (and the
// memories older than pairs): DuplicatePassDue says so until it has run.
func (s *Store) Import(ctx context.Context, ms []Memory, now time.Time) (added int, err error) {
	clean := make([]Memory, 0, len(ms))
	for i, m := range ms {
		if m.ForgottenAt != nil {
			continue
		}
		if err := s.cleanImported(&m, now); err != nil {
			return 0, fmt.Errorf("import memory %d (%s): %w", i+1, m.ID, err)
		}
		clean = append(clean, m)
	}
	err = s.withBulkTx(ctx, func(tx cachedTx) error {
		// The words' counts are added up here and written once: a write per memory was
		// half of an import's time.
		counts := map[string]int{}
		sharedIn := map[string]bool{}
		for _, m := range clean {
			// The export's folder (else the memory's directory) labels a project the store
			// has no folder for; a folder learned from a session here is kept.
			if folder := cmp.Or(m.Folder, m.Directory); folder != "" {
				if _, err := tx.ExecContext(ctx, `INSERT INTO projects (key, folder, updated) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`,
					m.Project, folder, toMS(m.CreatedAt)); err != nil {
					return err
				}
			}
			var known bool
			err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM memories WHERE id = ?)
				OR EXISTS (SELECT 1 FROM memories WHERE project = ? AND norm = ? AND forgotten_at = 0)`,
				m.ID, m.Project, normalize(m.Content)).Scan(&known)
			if err != nil {
				return err
			}
			if known {
				continue
			}
			if err := insertRow(ctx, tx, m); err != nil {
				return err
			}
			if m.Author != "" {
				if _, err := tx.ExecContext(ctx, `UPDATE memories SET author = ? WHERE id = ?`, m.Author, m.ID); err != nil {
					return err
				}
			}
			addWords(counts, m.Content, 1)
			if err := audit(ctx, tx, m.ID, now, "import", Caller{}, "", ""); err != nil {
				return err
			}
			// An import into a shared project is sent like any change; one into a project
			// not shared gets its version when the project is shared (Share), which keeps
			// a large import as fast as before.
			shared, ok := sharedIn[m.Project]
			if !ok {
				if shared, err = isShared(ctx, tx, m.Project); err != nil {
					return err
				}
				sharedIn[m.Project] = shared
			}
			if shared {
				if err := s.stamp(ctx, tx, m.ID, "import", now); err != nil {
					return err
				}
			}
			added++
		}
		if added == 0 {
			return nil
		}
		if err := writeWords(ctx, tx, counts); err != nil {
			return err
		}
		return setMeta(ctx, tx, metaImportAt, toMS(now))
	})
	if err != nil {
		return 0, fmt.Errorf("import memories: %w", err)
	}
	return added, nil
}

func (s *Store) cleanImported(m *Memory, now time.Time) error {
	var err error
	if !idPattern.MatchString(m.ID) {
		return fmt.Errorf("%w: id %q is not mem_ followed by 20 hex digits", ErrBadRequest, m.ID)
	}
	if m.Project == "" {
		return fmt.Errorf("%w: project is empty", ErrBadRequest)
	}
	if m.Content, err = s.cleanContent(m.Content); err != nil {
		return err
	}
	if m.Kind, err = cleanKind(m.Kind); err != nil {
		return err
	}
	if m.Tags, err = s.cleanTags(m.Tags); err != nil {
		return err
	}
	if m.Branch, err = s.cleanBranch(m.Branch); err != nil {
		return err
	}
	// A directory of another system (C:\src on Linux) cannot be judged here: it is dropped
	// rather than failing the import.
	if m.Directory, err = cleanDirectory(m.Directory); err != nil {
		m.Directory = ""
	}
	if m.Folder, err = cleanDirectory(m.Folder); err != nil {
		m.Folder = ""
	}
	if m.BranchTip, err = cleanTip(m.BranchTip); err != nil {
		return err
	}
	// The author of the version exported (§9): a name, kept as it is when it is one.
	if m.Author = strings.TrimSpace(strings.ToValidUTF8(m.Author, "")); utf8.RuneCountInString(m.Author) > 200 {
		return fmt.Errorf("%w: author is %d characters, over the limit of 200", ErrBadRequest, utf8.RuneCountInString(m.Author))
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = m.CreatedAt
	}
	return nil
}

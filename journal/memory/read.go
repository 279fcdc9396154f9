package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Get is any memory, forgotten ones included, with its audit trail oldest first.
func (s *Store) Get(ctx context.Context, id string) (Memory, []Audit, error) {
	m, err := scanMemory(s.r.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, nil, fmt.Errorf("%w: no memory %s", ErrNotFound, id)
	}
	if err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT at, op, session_id, call_id, reason, before, author FROM memory_log WHERE memory_id = ? ORDER BY id`, id)
	if err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	defer rows.Close()
	log := []Audit{}
	for rows.Next() {
		var a Audit
		var at int64
		if err := rows.Scan(&at, &a.Op, &a.SessionID, &a.CallID, &a.Reason, &a.Before, &a.Author); err != nil {
			return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
		}
		a.At = toTime(at)
		log = append(log, a)
	}
	if err := rows.Err(); err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	ms := []Memory{m}
	if err := s.withFolders(ctx, ms); err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	return ms[0], log, nil
}

// List is live memories: the best matches of q.Query first when it is set (without counting
// them as used), else the newest first. Limit defaults to 100, at most 1000.
func (s *Store) List(ctx context.Context, q ListQuery) ([]Memory, error) {
	limit, err := checkLimit(q.Limit, DefaultListLimit, 1000)
	if err != nil {
		return nil, err
	}
	var kinds []string
	if q.Kind != "" {
		if _, err := cleanKind(q.Kind); err != nil {
			return nil, err
		}
		kinds = []string{q.Kind}
	}
	out := []Memory{}
	if q.Query != "" {
		terms := queryTerms(q.Query)
		if len(terms) == 0 {
			return nil, errNoWords
		}
		hits, err := s.rank(ctx, q.Projects, terms, kinds, limit, true, nil)
		if err != nil {
			return nil, fmt.Errorf("list memories: %w", err)
		}
		for _, h := range hits {
			out = append(out, h.Memory)
		}
		if err := s.withFolders(ctx, out); err != nil {
			return nil, fmt.Errorf("list memories: %w", err)
		}
		return out, nil
	}
	cond, args := inProjects("m.project", q.Projects)
	state := `m.forgotten_at = 0`
	if q.Forgotten {
		state = `m.forgotten_at > 0`
	}
	query := `SELECT ` + memoryCols + ` FROM memories m WHERE ` + state + cond
	if q.Kind != "" {
		query += ` AND m.kind = ?`
		args = append(args, q.Kind)
	}
	if q.After != "" {
		query += ` AND m.id < ?`
		args = append(args, q.After)
	}
	query += ` ORDER BY m.id DESC LIMIT ?`
	out, err = s.memories(ctx, query, append(args, limit)...)
	if err == nil {
		err = s.withFolders(ctx, out)
	}
	if err != nil {
		return nil, fmt.Errorf("list memories: %w", err)
	}
	return out, nil
}

// Export is live memories of the project keys projects (none = every project) oldest first
// (insertion order) after the memory after ("" = from the start). limit defaults to 1000, at
// most 10000.
func (s *Store) Export(ctx context.Context, projects []string, after string, limit int) ([]Memory, error) {
	limit, err := checkLimit(limit, DefaultExportLimit, 10000)
	if err != nil {
		return nil, err
	}
	var from int64
	if after != "" {
		err := s.r.QueryRowContext(ctx, `SELECT seq FROM memories WHERE id = ?`, after).Scan(&from)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: export cursor %s is unknown; start again from the beginning", ErrNotFound, after)
		}
		if err != nil {
			return nil, fmt.Errorf("export memories: %w", err)
		}
	}
	cond, args := inProjects("m.project", projects)
	query := `SELECT ` + memoryCols + ` FROM memories m WHERE m.forgotten_at = 0 AND m.seq > ?` + cond
	out, err := s.memories(ctx, query+` ORDER BY m.seq LIMIT ?`, append(append([]any{from}, args...), limit)...)
	if err == nil {
		err = s.withFolders(ctx, out)
	}
	if err != nil {
		return nil, fmt.Errorf("export memories: %w", err)
	}
	return out, nil
}

// live is the live memory id of project; project "" matches any project.
func live(ctx context.Context, q queryer, id, project string) (Memory, error) {
	m, err := scanMemory(q.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ? AND m.forgotten_at = 0`, id))
	if errors.Is(err, sql.ErrNoRows) || err == nil && project != "" && m.Project != project {
		return Memory{}, fmt.Errorf("%w: no live memory %s in this project; search memories for the current id", ErrNotFound, id)
	}
	return m, err
}

// liveByNorm is the live memory of project with the normalized content norm.
func liveByNorm(ctx context.Context, q queryer, project, norm string) (Memory, error) {
	m, err := scanMemory(q.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.project = ? AND m.norm = ? AND m.forgotten_at = 0`, project, norm))
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, ErrNotFound
	}
	return m, err
}

// memoryCols are the columns scanMemory reads, of the memories table aliased m.
const memoryCols = `m.id, m.project, m.branch, m.directory, m.branch_tip, m.kind, m.content, m.tags, m.created_at, m.updated_at, m.used_at, m.forgotten_at, m.source_session, m.source_call, m.source_host, m.source_client, m.author, m.project IN (SELECT project FROM team_shared)`

type scanner interface{ Scan(dest ...any) error }

func scanMemory(row scanner, extra ...any) (Memory, error) {
	var m Memory
	var tags string
	var created, updated, used, forgotten int64
	dest := append([]any{&m.ID, &m.Project, &m.Branch, &m.Directory, &m.BranchTip, &m.Kind, &m.Content, &tags, &created, &updated, &used, &forgotten, &m.Source.SessionID, &m.Source.CallID, &m.Source.Host, &m.Source.Client, &m.Author, &m.Shared}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Memory{}, err
	}
	m.Tags = decodeTags(tags)
	m.CreatedAt, m.UpdatedAt = toTime(created), toTime(updated)
	if used != 0 {
		t := toTime(used)
		m.UsedAt = &t
	}
	if forgotten != 0 {
		t := toTime(forgotten)
		m.ForgottenAt = &t
	}
	return m, nil
}

// decodeTags is a memory's tags column, a JSON list of strings; anything else is no tags.
func decodeTags(col string) []string {
	var tags []string
	if err := json.Unmarshal([]byte(col), &tags); err != nil || tags == nil {
		return []string{}
	}
	return tags
}

// memories runs a query selecting memoryCols.
func (s *Store) memories(ctx context.Context, query string, args ...any) ([]Memory, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Memory{}
	for rows.Next() {
		m, err := scanMemory(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

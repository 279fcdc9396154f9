package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Files answers the API methods that only read, from the files of a data folder whose
// thatch is not running: the journal (thatch.db) and the memory store (memories.db), both
// opened read-only (journal.OpenReadOnly, memory.OpenReadOnly), so the files stay as the
// daemon left them and a daemon that starts meanwhile is not held up. The answers are the
// running daemon's, made by the same code (natsbus.Server.Answer) from the same rows: the
// CLI prints them the same way. Every other method is refused with NotRunning's error.
// A Files is for one command: it is not safe for concurrent use.
type Files struct {
	c   Config
	srv natsbus.Server
	// Read, when set, is called once with the path of the first file read, so the CLI
	// says where its answer comes from.
	Read func(path string)

	journal  *journal.Store
	memories *memory.Store
	loaded   bool // srv.State holds the journal's state
}

// NewFiles is a Files on the data folder of c; it opens each file when a method first
// needs it.
func NewFiles(c Config) *Files {
	return &Files{c: c, srv: natsbus.Server{Prefix: c.APIPrefix, Log: slog.New(slog.DiscardHandler)}}
}

// ReadMethods are the methods Files answers: those that change nothing.
var ReadMethods = map[string]bool{
	protocol.APISessions: true, protocol.APIEntries: true, protocol.APIDeadLetters: true, protocol.APICosts: true,
	protocol.APIMemories: true, protocol.APIMemoryGet: true, protocol.APIMemoryProjects: true, protocol.APIMemoryExport: true,
	protocol.APIMemorySignals: true, protocol.APIMemoryHygiene: true,
}

// NotRunning is the error of a command that needs the daemon of c's data folder while no
// thatch serve runs there.
func NotRunning(c Config) error {
	return fmt.Errorf("thatch is not running (data folder %s): start it with `thatch serve`", c.DataDir)
}

// Raw answers method with params from the files, as API.Raw answers it from the daemon: a
// refusal is a *protocol.Error.
func (f *Files) Raw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if !ReadMethods[method] {
		return nil, fmt.Errorf("%s needs a running thatch: %w", method, NotRunning(f.c))
	}
	var err error
	switch method {
	case protocol.APISessions, protocol.APIEntries:
		err = f.load()
	case protocol.APIDeadLetters, protocol.APICosts:
		err = f.openJournal()
	case protocol.APIMemoryGet:
		if err = f.openMemories(); err == nil {
			// The session its extraction came from, when the journal can say: without it
			// the memory is shown without that line, as the daemon shows it.
			_ = f.openJournal()
		}
	default:
		err = f.openMemories()
	}
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	res, herr := f.srv.Answer(ctx, method, data)
	var b bytes.Buffer
	if err := protocol.EncodeTo(&b, res, herr); err != nil {
		return nil, fmt.Errorf("encode the answer to %s: %w", method, err)
	}
	result, replyErr, err := protocol.Decode(b.Bytes())
	if err != nil {
		return nil, err
	}
	if replyErr != nil {
		return nil, replyErr
	}
	return result, nil
}

// read says, once, that path is read.
func (f *Files) read(path string) {
	if f.Read != nil {
		f.Read(path)
		f.Read = nil
	}
}

func (f *Files) openJournal() error {
	if f.journal != nil {
		return nil
	}
	path := filepath.Join(f.c.DataDir, "thatch.db")
	s, err := journal.OpenReadOnly(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("thatch is not running, and its data folder %s holds no journal (thatch.db): %w", f.c.DataDir, err)
	}
	if err != nil {
		return err
	}
	f.journal = s
	f.srv.Costs, f.srv.DeadLetters, f.srv.ExtractedFrom, f.srv.Provenance = s.Costs, s.DeadLetterPage, s.ExtractedFrom, s.Provenance
	if f.memories == nil {
		f.read(path)
	}
	return nil
}

// load reads the journal's sessions and entries into the state the list methods answer
// from, as a start does.
func (f *Files) load() error {
	if f.loaded {
		return nil
	}
	if err := f.openJournal(); err != nil {
		return err
	}
	st, _, _, err := f.journal.Load()
	if err != nil {
		return fmt.Errorf("read the journal %s: %w", f.journal.Path(), err)
	}
	f.srv.State, f.loaded = st, true
	return nil
}

func (f *Files) openMemories() error {
	if f.memories != nil {
		return nil
	}
	path := filepath.Join(f.c.DataDir, "memories.db")
	s, err := memory.OpenReadOnly(path, memory.Options{StaleAfter: time.Duration(f.c.MemoryStaleDays) * 24 * time.Hour})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("thatch is not running, and its data folder %s holds no memories (memories.db): %w", f.c.DataDir, err)
	}
	if err != nil {
		return err
	}
	f.memories = s
	f.srv.Memories = &natsbus.Memories{Store: s, InjectChars: f.c.MemoryInjectChars}
	f.read(path)
	return nil
}

// Close closes the files it opened.
func (f *Files) Close() error {
	var errs []error
	if f.memories != nil {
		errs = append(errs, f.memories.Close())
	}
	if f.journal != nil {
		errs = append(errs, f.journal.Close())
	}
	return errors.Join(errs...)
}

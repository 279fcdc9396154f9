package checkpoint

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// open opens a writer as the stores do: WAL, and no checkpoint of its own.
func open(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	return db, path
}

func walPages(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		return 0
	}
	return fi.Size() / 4096
}

// TestCheckpointsBesideTheWriter: the writer never checkpoints; the checkpointer does,
// every Every writes, and the WAL starts over instead of growing.
func TestCheckpointsBesideTheWriter(t *testing.T) {
	db, path := open(t)
	c, err := Start(path, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	row := strings.Repeat("x", 3000)
	for i := range 2000 {
		if _, err := db.Exec(`INSERT INTO t (v) VALUES (?)`, row); err != nil {
			t.Fatal(err)
		}
		c.Wrote()
		if i%8 == 7 {
			// A pause between commits now and then, as under load, long enough for the
			// kick to be served: how long that takes depends on what else this machine
			// runs, so the pause waits for it instead of sleeping a fixed time.
			waitRuns(t, c, int64(i/8+1))
		}
	}
	// A WAL that never started over holds every page the writes wrote: the same writes on
	// a writer without a checkpointer show how many.
	db2, path2 := open(t)
	for range 2000 {
		if _, err := db2.Exec(`INSERT INTO t (v) VALUES (?)`, row); err != nil {
			t.Fatal(err)
		}
	}
	if n, all := walPages(t, path), walPages(t, path2); n > all/2 {
		t.Errorf("the WAL holds %d pages after 2,000 writes checkpointed every 8; %d without checkpoints", n, all)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2000 {
		t.Fatalf("rows %d, %v", n, err)
	}
}

// waitRuns waits until the checkpointer has served n kicks.
func waitRuns(t *testing.T, c *Checkpointer, n int64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d kicks served", n), func() error {
		if kicks, _ := c.Runs(); kicks < n {
			return fmt.Errorf("%d served", kicks)
		}
		return nil
	})
}

// TestRestartBoundsTheWAL: a WAL at maxFrames gets a RESTART checkpoint, after which the
// next write starts it over.
func TestRestartBoundsTheWAL(t *testing.T) {
	db, path := open(t)
	c, err := Start(path, 1000000, 64) // kicked by hand only
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	row := strings.Repeat("y", 3000)
	for range 200 {
		if _, err := db.Exec(`INSERT INTO t (v) VALUES (?)`, row); err != nil {
			t.Fatal(err)
		}
	}
	before := walPages(t, path)
	if before < 64 {
		t.Fatalf("the WAL holds %d pages only", before)
	}
	c.Kick()
	testkit.WaitFor(t, 30*time.Second, "a RESTART checkpoint at maxFrames", func() bool {
		_, restarts := c.Runs()
		return restarts > 0
	})
	// The next write starts the WAL over: writes after it land at its beginning.
	for range 10 {
		if _, err := db.Exec(`INSERT INTO t (v) VALUES (?)`, row); err != nil {
			t.Fatal(err)
		}
	}
	var busy, log, copied int64
	if err := db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied); err != nil {
		t.Fatal(err)
	}
	if log >= before {
		t.Errorf("the WAL did not start over: %d frames, %d before", log, before)
	}
}

// TestCloseTwice: Close stops the goroutine; a second Close does nothing.
func TestCloseTwice(t *testing.T) {
	_, path := open(t)
	c, err := Start(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Kick()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

package journal

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// The read pool keeps its four connections between bursts of payload reads: a connection it
// closed had to be opened again, and the payload's statement prepared again on it.
func TestReadPoolKeepsItsConnections(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for range 3 {
		var conns []*sql.Conn
		for range 4 {
			c, err := s.r.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
	}
	if st := s.r.Stats(); st.MaxIdleClosed != 0 || st.Idle != 4 || st.OpenConnections != 4 {
		t.Errorf("read pool after three bursts of four: %d open, %d idle, %d closed for want of room", st.OpenConnections, st.Idle, st.MaxIdleClosed)
	}
}

package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

// The directory the loop publishes for the operator's page, kept up to date one commit at
// a time, always equals the one built from the whole state: whatever the events (sessions
// created under parents, tool calls, busy and idle with their extractions, deletions,
// hellos of two hosts), the page shows what the state holds.
func TestTableFollowsTheState(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var children atomic.Int64
			caller := &fakeCaller{do: func(c runtime.Call) runtime.Result {
				r := runtime.Result{Call: c}
				if c.Op == runtime.OpCreate {
					id := fmt.Sprintf("ses_child%03d", children.Add(1))
					r.Session = &runtime.SessionInfo{ID: id, ParentID: c.SessionID, Title: c.Title, Directory: "/w"}
				}
				return r
			}}
			r := startLoop(t, t.TempDir(), caller)
			defer r.stop()
			rng := rand.New(rand.NewPCG(seed, 1))
			var sessions []string
			hosts := []string{"h1", "h2"}
			opened := false
			for i := range 300 {
				host := hosts[rng.IntN(2)]
				id := fmt.Sprintf("e%d", i)
				pick := func() string { return sessions[rng.IntN(len(sessions))] }
				switch k := rng.IntN(10); {
				case k == 0 || len(sessions) == 0:
					sid := fmt.Sprintf("ses_%s_%03d", host, i)
					parent := ""
					if len(sessions) > 0 && rng.IntN(3) == 0 {
						parent = pick()
					}
					r.deliverAs(host, id, "session.created", fmt.Sprintf(`{"sessionID":%q,"info":{"id":%q,"parentID":%q,"title":"t%d","directory":"/w"}}`, sid, sid, parent, i))
					sessions = append(sessions, sid)
				case k == 1:
					r.deliverAs(host, id, "host.hello", fmt.Sprintf(`{"hostID":%q,"api":"v1","version":"x","bootID":"b%d","directory":"/w","worktree":"/w","capabilities":{},"resumed":[]}`, host, rng.IntN(3)))
				case k <= 5:
					r.deliverAs(host, id, "tool.execute.after", fmt.Sprintf(`{"sessionID":%q,"callID":"c%d","tool":"bash","args":{},"output":"some output %d"}`, pick(), i, i))
				case k <= 7:
					r.deliverAs(host, id, "session.status", fmt.Sprintf(`{"sessionID":%q,"status":{"type":"busy"}}`, pick()))
				case k == 8:
					r.deliverAs(host, id, "session.status", fmt.Sprintf(`{"sessionID":%q,"status":{"type":"idle"}}`, pick()))
				default:
					sid := pick()
					r.deliverAs(host, id, "session.deleted", fmt.Sprintf(`{"sessionID":%q,"info":{"id":%q}}`, sid, sid))
				}
				if !opened && i == 20 { // the page opens while thatch works
					if _, err := r.loop.Table(context.Background()); err != nil {
						t.Fatal(err)
					}
					opened = true
				}
			}
			r.waitView("every event applied", func(v runtime.View) bool { return v.Pos == r.seq && v.Outstanding == 0 })
			want, err := r.loop.Query(context.Background(), func(v runtime.View) any { return runtime.BuildTable(v.State, nil, time.Time{}) })
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.loop.Table(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			w := want.(*runtime.Table)
			if len(w.Sessions) < 5 {
				t.Fatalf("only %d live sessions: the events did not make a directory worth comparing", len(w.Sessions))
			}
			if !reflect.DeepEqual(got.Hosts, w.Hosts) || !reflect.DeepEqual(got.Sessions, w.Sessions) {
				t.Fatalf("published directory differs from the state's:\n got %+v\nwant %+v", got, w)
			}
		})
	}
}

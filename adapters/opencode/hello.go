package opencode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// hello announces a new boot: a fresh bootID, Host-Seq from 1. recheckTools says it again
// within the boot when the tools opencode lacks change.
func (b *Bridge) hello(ctx context.Context) error {
	var health struct {
		Version string `json:"version"`
	}
	var path struct {
		Directory string `json:"directory"`
		Worktree  string `json:"worktree"`
	}
	_ = b.Client.do(ctx, "GET", "/global/health", nil, &health)
	_ = b.Client.do(ctx, "GET", "/path", nil, &path)
	small, err := b.Client.SmallModel(ctx) // extraction runs on it (protocol extension)
	if err != nil {
		b.Log.Warn("could not read opencode's config; extraction runs on the session's model", "err", err)
	}
	missing, err := b.missingTools(ctx, true)
	if err != nil {
		b.Log.Debug("could not list opencode's tools; the hello says nothing of thatch's", "err", err)
	} else if len(missing) > 0 {
		// thatch says so (an error, a toast, status); this line is for a bridge run on its own.
		b.Log.Info(b.toolsMissing(missing).Message)
	}
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	boot := hex.EncodeToString(raw[:])
	hi := &runtime.Hello{HostID: b.HostID, API: "v1", Version: health.Version, BootID: boot,
		Directory: path.Directory, Worktree: path.Worktree, Caps: runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true, Context: true},
		Resumed: []string{}, SmallModel: small, MissingTools: missing}
	props, _ := json.Marshal(hi)
	b.Log.Info("opencode connected", "version", health.Version, "boot_id", boot, "small_model", small)
	if err := b.serveAPI(ctx); err != nil {
		return err
	}
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	b.pubMu.Lock() // held from the reset to the hello: no shim event slips in between
	defer b.pubMu.Unlock()
	b.seq = 0
	// Cleared before the publish: a call turned away after it is owed the next hello.
	turned := b.turnedAway.Swap(false)
	if err := b.publishLocked(ctx, Event{ID: "hello_" + boot, Type: protocol.EventHostHello, Properties: props}); err != nil {
		if turned {
			b.turnedAway.Store(true)
		}
		return err
	}
	b.boot, b.told, b.rehellos = hi, missing, 0
	return nil
}

// Rehello asks the bridge to say the current boot's hello again (the same bootID), as
// soon as it can: thatch sends a host's waiting calls when it applies a hello of the
// host, and waits for one after a call found no responder. Its owner calls it when the
// connection to NATS is restored (thatch restarted with its embedded broker, and parked
// the calls it resumed while the bridge was not connected). It does not block, and does
// nothing before Run says the first hello or while opencode is unreachable: the next
// boot's hello then does it.
func (b *Bridge) Rehello() {
	select {
	case b.rehelloC() <- struct{}{}:
	default: // one is on its way
	}
}

func (b *Bridge) rehelloC() chan struct{} {
	b.rehelloOnce.Do(func() { b.rehello = make(chan struct{}, 1) })
	return b.rehello
}

// helloAgain says the current boot's hello again, with the tools opencode lacks as of the
// last look (ToolsTTL), and does nothing when there is no current boot.
func (b *Bridge) helloAgain(ctx context.Context, why string) error {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	missing, err := b.missingTools(lctx, false)
	cancel()
	if err != nil {
		missing = b.told
	}
	if err := b.helloAgainLocked(ctx, missing); err != nil {
		return err
	}
	b.Log.Info("said hello again so that thatch sends the calls waiting for opencode", "boot_id", b.boot.BootID, "why", why)
	return nil
}

// helloAgainLocked publishes the boot's hello again with missing as its missingTools:
// the same bootID and fields, the next Host-Seq, the event id hello_<bootID>_<n>. The
// caller holds helloMu, and b.boot is set.
func (b *Bridge) helloAgainLocked(ctx context.Context, missing []string) error {
	hi := *b.boot
	hi.MissingTools = missing
	props, _ := json.Marshal(hi)
	b.rehellos++
	turned := b.turnedAway.Swap(false) // before the publish, as in hello
	if err := b.publish(ctx, Event{ID: fmt.Sprintf("hello_%s_%d", hi.BootID, b.rehellos), Type: protocol.EventHostHello, Properties: props}); err != nil {
		if turned {
			b.turnedAway.Store(true)
		}
		return err
	}
	b.boot, b.told = &hi, missing
	return nil
}

// bootID is the current boot's id, "" when there is none.
func (b *Bridge) bootID() string {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil {
		return ""
	}
	return b.boot.BootID
}

// endBoot forgets the current boot's hello once the server went away: the next boot
// starts with a hello of its own, and none is said again for the old one.
func (b *Bridge) endBoot() {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	b.boot, b.told = nil, nil
}

package opencode

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// watch looks at opencode's tools every ToolsRecheck while thatch was told that some are
// missing (recheckTools), and says hello again when Rehello asks, until ctx ends.
func (b *Bridge) watch(ctx context.Context) {
	tick := time.NewTicker(cmp.Or(b.ToolsRecheck, DefaultToolsRecheck))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := b.recheckTools(ctx, true); err != nil && ctx.Err() == nil {
				b.Log.Warn("could not tell thatch that opencode's tools changed; the next look tries again", "err", err)
			}
		case <-b.rehelloC():
			if err := b.helloAgain(ctx, "the broker connection was restored"); err != nil && ctx.Err() == nil {
				b.Log.Warn("could not say hello again after the broker connection was restored; calls waiting in thatch wait for the next one", "err", err)
			}
		}
	}
}

// recheckTools says the boot's hello again, with the same bootID, when the tools opencode
// lacks are no longer the ones thatch was told of. While a host's last hello names missing
// tools thatch starts no extraction, and opencode can load thatch's plugin without a
// restart (POST /instance/dispose after thatch install): without a new hello the block
// would last as long as the connection. It does nothing unless thatch was told of missing
// tools, so a bridge whose opencode has them makes no request; fresh looks again whatever
// the age of the last look. An error is the broker's: a look that fails says nothing.
func (b *Bridge) recheckTools(ctx context.Context, fresh bool) error {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil || len(b.told) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	missing, err := b.missingTools(lctx, fresh)
	cancel()
	if err != nil || slices.Equal(missing, b.told) {
		return nil
	}
	if err := b.helloAgainLocked(ctx, missing); err != nil {
		return err
	}
	if len(missing) == 0 {
		b.Log.Info("opencode loaded thatch's tools: said hello again so that extraction resumes", "boot_id", b.boot.BootID)
	} else {
		b.Log.Info(b.toolsMissing(missing).Message, "boot_id", b.boot.BootID)
	}
	return nil
}

// thatchTools are the tools thatch's plugin gives opencode's models.
var thatchTools = []string{protocol.ToolPayload, protocol.ToolDone, protocol.ToolRemember, protocol.ToolSearch, protocol.ToolUpdate, protocol.ToolForget}

// toolCheck is the last look at opencode's tools.
type toolCheck struct {
	mu      sync.Mutex
	at      time.Time
	missing []string
	err     error
}

// missingTools returns thatch's tools that opencode does not serve, from a look at most
// ToolsTTL old unless fresh. An error means opencode cannot say (one without the route).
func (b *Bridge) missingTools(ctx context.Context, fresh bool) ([]string, error) {
	b.tools.mu.Lock()
	defer b.tools.mu.Unlock()
	if !fresh && !b.tools.at.IsZero() && time.Since(b.tools.at) < cmp.Or(b.ToolsTTL, DefaultToolsTTL) {
		return b.tools.missing, b.tools.err
	}
	ids, err := b.Client.ToolIDs(ctx)
	var missing []string
	for _, t := range thatchTools {
		if err == nil && !slices.Contains(ids, t) {
			missing = append(missing, t)
		}
	}
	b.tools.at, b.tools.missing, b.tools.err = time.Now(), missing, err
	return missing, err
}

// refused records that thatch was told of missing tools by a refused create: thatch then
// holds them missing until the next hello, which recheckTools says when they change.
func (b *Bridge) refused(missing []string) {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot != nil {
		b.told = missing
	}
}

// toolsMissing is the answer to an extraction child's creation when opencode has not
// loaded thatch's plugin.
func (b *Bridge) toolsMissing(missing []string) *protocol.Error {
	plugin := cmp.Or(b.PluginPath, "plugin/thatch.js in its config folder")
	return &protocol.Error{Name: protocol.ToolsMissing, Message: fmt.Sprintf(
		"opencode has not loaded thatch's plugin (missing tools: %s): run thatch install if you have not, then restart opencode (or POST /instance/dispose) so it loads the plugin from %s",
		strings.Join(missing, ", "), plugin)}
}

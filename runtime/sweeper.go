package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrSweepDisabled is returned for a strand sweep that would act while the strand sweep
// is switched off.
var ErrSweepDisabled = errors.New("the strand sweep is off (THATCH_STRAND_SWEEP=off): only a dry run is allowed")

// Sweeper runs the periodic sweeps (rules 8 and 9): at start, after a host's new boot, and
// every Every. It does the I/O — host listings and directory checks — and hands the
// results to the loop, which alone changes the state.
type Sweeper struct {
	Loop   *Loop
	Caller Caller
	Every  time.Duration
	// RetryEvery is how often it looks for failed extractions due for a retry (retry.go);
	// 0: every 15 s, or every Every when that is shorter.
	RetryEvery time.Duration
	Strand     bool // THATCH_STRAND_SWEEP
	// Exists reports whether a directory exists on thatch's filesystem (the daemon's
	// os.Stat); required.
	Exists func(string) bool
	// Also runs after each journal sweep (the memory store's own pruning); its error is
	// logged.
	Also func(ctx context.Context) error
	Log  *slog.Logger
}

// SweepResult is one strand sweep's plan.
type SweepResult struct {
	Actions []StrandAction `json:"actions"`
}

// Run sweeps until ctx ends.
func (w *Sweeper) Run(ctx context.Context) error {
	w.runOnce(ctx)
	ticker := time.NewTicker(w.Every)
	defer ticker.Stop()
	retries := time.NewTicker(cmp.Or(w.RetryEvery, min(15*time.Second, w.Every)))
	defer retries.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			w.runOnce(ctx)
		case <-retries.C:
			if err := w.Retry(ctx, time.Now()); err != nil && ctx.Err() == nil {
				w.Log.Warn("extraction retry failed", "err", err)
			}
		case host := <-w.Loop.NewBoots():
			if w.Strand {
				if _, err := w.Sweep(ctx, host, false); err != nil && ctx.Err() == nil {
					w.Log.Warn("strand sweep failed", "host", host, "err", err)
				}
			}
		}
	}
}

// runOnce is one timer round: the journal sweep, the strand sweep of every online host
// when it is on, then the memory store's part (last: it may take seconds).
func (w *Sweeper) runOnce(ctx context.Context) {
	if err := w.JournalSweep(ctx); err != nil && ctx.Err() == nil {
		w.Log.Warn("journal sweep failed", "err", err)
	}
	if w.Strand {
		if _, err := w.Sweep(ctx, "", false); err != nil && ctx.Err() == nil {
			w.Log.Warn("strand sweep failed", "err", err)
		}
	}
	if w.Also != nil {
		if err := w.Also(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("memory store sweep failed", "err", err)
		}
	}
}

// Retry hands the loop a RetryTick when a failed extraction is due for a retry at now,
// and nothing otherwise: an idle thatch commits nothing every few seconds.
func (w *Sweeper) Retry(ctx context.Context, now time.Time) error {
	v, err := w.Loop.Query(ctx, func(v View) any { return len(w.Loop.Rules.RetriesDue(v.State, now)) > 0 })
	if err != nil || !v.(bool) {
		return err
	}
	return w.Loop.Submit(ctx, RetryTick{})
}

// JournalSweep checks the tracked sessions' directories and ticks the loop.
func (w *Sweeper) JournalSweep(ctx context.Context) error {
	v, err := w.Loop.Query(ctx, func(v View) any { return Directories(v.State) })
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	for _, d := range v.([]string) {
		exists[d] = w.Exists(d)
	}
	return w.Loop.Submit(ctx, Tick{Exists: exists})
}

// Sweep runs one strand sweep of hostID, or of every online host when it is "", and
// returns the plan. A dry run only plans.
func (w *Sweeper) Sweep(ctx context.Context, hostID string, dryRun bool) (SweepResult, error) {
	res := SweepResult{Actions: []StrandAction{}}
	if !dryRun && !w.Strand {
		return res, ErrSweepDisabled
	}
	v, err := w.Loop.Query(ctx, func(v View) any { return SweepTargets(v.State, hostID) })
	if err != nil {
		return res, err
	}
	hosts := v.([]Host)
	if hostID != "" && len(hosts) == 0 {
		return res, fmt.Errorf("thatch knows no host %q", hostID)
	}
	var errs []error
	for _, h := range hosts {
		actions, err := w.plan(ctx, h)
		var he *HostError
		if hostID == "" && errors.As(err, &he) && he.NoResponder {
			// Not running (or, at thatch's start, its bridge not up yet): its next hello sweeps it.
			w.Log.Info("host does not answer; its strand sweep waits for its next hello", "host", h.ID)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.Actions = append(res.Actions, actions...)
		if !dryRun && len(actions) > 0 {
			if err := w.Loop.Submit(ctx, SweepApply{Host: h.ID, Actions: actions}); err != nil {
				return res, err
			}
		}
	}
	return res, errors.Join(errs...)
}

// plan lists a host's sessions and projects and plans its strand sweep.
func (w *Sweeper) plan(ctx context.Context, h Host) ([]StrandAction, error) {
	list := w.Caller.Do(ctx, h.API, Call{Host: h.ID, Op: OpList})
	if list.Err != nil {
		return nil, fmt.Errorf("list the sessions of host %s: %w", h.ID, list.Err)
	}
	worktrees := map[string]string{}
	if projects := w.Caller.Do(ctx, h.API, Call{Host: h.ID, Op: OpProjects}); projects.Err == nil {
		for _, p := range projects.Projects {
			worktrees[p.ID] = p.Worktree
		}
	} else {
		w.Log.Info("host listed no projects: stranded sessions cannot be moved", "host", h.ID, "err", projects.Err)
	}
	seen := map[string]bool{}
	exists := func(dir string) bool {
		e, ok := seen[dir]
		if !ok {
			e = w.Exists(dir)
			seen[dir] = e
		}
		return e
	}
	actions := PlanStrandActions(list.Sessions, exists, worktrees, h.Caps.Move)
	for _, a := range actions {
		w.Log.Debug("strand sweep plan", "host", h.ID, "kind", a.Kind, "session", a.SessionID, "directory", a.Directory, "reason", a.Reason)
	}
	return actions, nil
}

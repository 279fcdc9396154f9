package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// A command is one of thatch's subcommands: a small type whose fields are its flags. The
// flags Flags binds are the only ones its command line takes, and every usage text (its
// --help, thatch's list of commands) is made from them, so the two cannot disagree.
type command interface {
	// Usage says what the command is and which positional arguments it takes.
	Usage() usage
	// Flags binds the command's flags to its fields.
	Flags(fs *flag.FlagSet)
	// Run runs the command, its flags parsed, with exactly the positional arguments its
	// usage names, against thatch's configuration, writing to out.
	Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error
}

// usage is what a command's usage text says besides its flags.
type usage struct {
	Name    string   // the words after thatch: "status", "memories show"
	Args    []string // its positional arguments, as the synopsis names them: SESSION
	Tail    string   // the synopsis's end, after the flags: "> FILE.jsonl"
	Summary string   // its line in thatch's list of commands
	Help    string   // what its --help says instead of the summary, when not ""
}

// allCommands are thatch's subcommands, new, in the order thatch's usage lists them.
func allCommands() []command {
	return []command{
		&serveCommand{}, &bridgeCommand{},
		&statusCommand{}, &sessionsCommand{}, &entriesCommand{}, &sweepCommand{}, &costsCommand{}, &deadLettersCommand{},
		&memoriesCommand{}, &memoriesProjectsCommand{}, &memoriesShowCommand{}, &memoriesAddCommand{}, &memoriesForgetCommand{},
		&memoriesRestoreCommand{}, &memoriesExportCommand{}, &memoriesImportCommand{}, &memoriesHygieneCommand{},
		&memoriesDismissCommand{}, &memoriesShareCommand{}, &memoriesShareCommand{unshare: true},
		&uiCommand{}, &mcpCommand{}, &hookCommand{}, &installCommand{}, &envCommand{}, &versionCommand{},
	}
}

// runCommand runs the command line args (["memories", "show", "ID"]): it finds the
// command, parses its flags (before or after the positional arguments), answers --help,
// refuses flags and arguments the command does not take, and runs it with the
// configuration load gives (thatch version needs none), writing to out.
func runCommand(ctx context.Context, load func() (daemon.Config, error), out io.Writer, args []string) error {
	all := allCommands()
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, listUsage(all))
		return errors.New("no command given")
	}
	switch args[0] {
	case "help", "--help", "-h":
		if len(args) > 1 && args[0] == "help" { // thatch help status: that command's help
			if cmd, _ := find(all, resolveAlias(args[1:])); cmd != nil {
				_, err := fmt.Fprintln(out, strings.TrimSuffix(helpText(cmd, all), "\n"))
				return err
			}
			return fmt.Errorf("thatch has no command %q: thatch help lists them", strings.Join(args[1:], " "))
		}
		_, err := fmt.Fprint(out, listUsage(all))
		return err
	case "--version", "-v":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, rest := find(all, resolveAlias(args))
	if cmd == nil && args[0] == "bench" {
		return errors.New("the benchmark is a command of its own now: make bench, or bin/thatch-bench (make build builds it)")
	}
	if cmd == nil {
		fmt.Fprint(os.Stderr, listUsage(all))
		return fmt.Errorf("unknown command %q", args[0])
	}
	u := cmd.Usage()
	fs := flagSet(cmd)
	help := strings.TrimSuffix(helpText(cmd, all), "\n")
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		_, err := fmt.Fprintln(out, help)
		return err
	}
	if err != nil {
		// The flag package names flags with one dash; thatch's usage and README with two.
		msg := strings.Replace(err.Error(), "provided but not defined: -", "provided but not defined: --", 1)
		msg = strings.Replace(msg, "needs an argument: -", "needs an argument: --", 1)
		return fmt.Errorf("%s\n%s", msg, help)
	}
	if len(pos) > 0 && len(u.Args) == 0 && rest[0] == pos[0] && len(subcommands(all, u.Name)) > 0 {
		return fmt.Errorf("thatch %s has no subcommand %q\n%s", u.Name, pos[0], help)
	}
	if len(pos) != len(u.Args) {
		want := "no arguments"
		if n := len(u.Args); n > 0 {
			want = fmt.Sprintf("%d %s (%s)", n, plural(n, "argument", "arguments"), strings.Join(u.Args, " "))
		}
		return fmt.Errorf("thatch %s takes %s, got %q\n%s", u.Name, want, pos, help)
	}
	var c daemon.Config
	if _, ok := cmd.(*versionCommand); !ok {
		if c, err = load(); err != nil {
			return err
		}
	}
	return cmd.Run(ctx, c, out, pos)
}

// find is the command that args name, with the arguments after its name: the command of
// the longest name args start with ("memories show" rather than "memories"); nil if none.
func find(all []command, args []string) (command, []string) {
	var found command
	n := 0
	for _, c := range all {
		words := strings.Fields(c.Usage().Name)
		if len(words) > n && len(words) <= len(args) && slices.Equal(words, args[:len(words)]) {
			found, n = c, len(words)
		}
	}
	return found, args[n:]
}

// flagSet is a flag set with cmd's flags, which reports its errors to nobody: they and
// the usage are runCommand's to show.
func flagSet(cmd command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.Usage().Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cmd.Flags(fs)
	return fs
}

// parseInterspersed parses flags that may come before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// synopsis is the command's line as a person types it: thatch sweep [--dry-run] [--host ID] [--json].
func synopsis(cmd command) string {
	u := cmd.Usage()
	parts := append([]string{"thatch", u.Name}, u.Args...)
	flagSet(cmd).VisitAll(func(f *flag.Flag) {
		parts = append(parts, "["+flagName(f)+"]")
	})
	if u.Tail != "" {
		parts = append(parts, u.Tail)
	}
	return strings.Join(parts, " ")
}

// flagName is how a flag is written: --json, --host ID (the back-quoted word of its
// usage names its value).
func flagName(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	if name == "" {
		return "--" + f.Name
	}
	return "--" + f.Name + " " + name
}

// helpText is a command's --help: its synopsis, what it does, its flags, and the
// commands under it (thatch memories lists thatch memories show and the others).
func helpText(cmd command, all []command) string {
	u := cmd.Usage()
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", synopsis(cmd))
	about := u.Help
	if about == "" {
		about = u.Summary
	}
	for line := range strings.SplitSeq(about, "\n") {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 4, ' ', 0)
	flagSet(cmd).VisitAll(func(f *flag.Flag) {
		_, text := flag.UnquoteUsage(f)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", flagName(f), text)
	})
	tw.Flush()
	if under := subcommands(all, u.Name); len(under) > 0 {
		fmt.Fprintf(&b, "\nthatch %s has subcommands:\n%s\nthatch %s SUBCOMMAND --help describes one.\n", u.Name, listLines(under), u.Name)
	}
	return b.String()
}

// subcommands are the commands under name: thatch memories show and the others under
// thatch memories.
func subcommands(all []command, name string) []command {
	var under []command
	for _, c := range all {
		if strings.HasPrefix(c.Usage().Name, name+" ") {
			under = append(under, c)
		}
	}
	return under
}

// listUsage is thatch's usage: its list of commands.
func listUsage(all []command) string {
	return "thatch: the session-lifecycle sidecar for opencode-style hosts\n\nUsage:\n" + listLines(all) +
		"\nthatch COMMAND --help describes one command. Configuration is by THATCH_* environment\nvariables: see docs/configuration.md.\n"
}

// listLines lists commands, a synopsis and a summary each.
func listLines(cmds []command) string {
	const column = 37 // where the summaries start
	var b strings.Builder
	for _, c := range cmds {
		line := "  " + synopsis(c)
		if len(line) < column-1 {
			line += strings.Repeat(" ", column-len(line))
		} else {
			line += "\n" + strings.Repeat(" ", column)
		}
		b.WriteString(line + c.Usage().Summary + "\n")
	}
	return b.String()
}

// jsonFlag is the --json flag of the commands that print JSON: their output is then one
// JSON document.
func jsonFlag(fs *flag.FlagSet, p *bool) { fs.BoolVar(p, "json", false, "print JSON") }

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
)

// versionCommand is thatch version.
type versionCommand struct{}

func (*versionCommand) Usage() usage { return usage{Name: "version", Summary: "print the version"} }

func (*versionCommand) Flags(*flag.FlagSet) {}

// Run needs no configuration: runCommand loads none for it.
func (*versionCommand) Run(_ context.Context, _ daemon.Config, out io.Writer, _ []string) error {
	_, err := fmt.Fprintln(out, version())
	return err
}

// version is the version the build was stamped with (make build), else the module's.
func version() string {
	if runtime.Version != "dev" {
		return runtime.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return runtime.Version
}

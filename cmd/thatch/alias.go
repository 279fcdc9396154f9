package main

import "slices"

// aliases are other names of commands, which thatch's usage does not list (its command
// table stays one row a command): what a user may well type first.
var aliases = map[string][]string{
	"memories list": {"memories"},
}

// resolveAlias is args with a command's alias at their start replaced by its name.
func resolveAlias(args []string) []string {
	if len(args) >= 2 {
		if to, ok := aliases[args[0]+" "+args[1]]; ok {
			return append(slices.Clone(to), args[2:]...)
		}
	}
	return args
}

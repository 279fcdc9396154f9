// Package scenario runs golden scenario scripts (testdata/scenarios) against the runtime's
// decision core.
//
// A script is a sequence of commands, each followed by a line "----" and the output it
// must produce, up to the next blank line:
//
//	event session.status session=ses_a status=idle
//	----
//	call #1 h1 session.create session=ses_a title=thatch-extraction purpose=extract
//
// Lines starting with # are comments. With -update the outputs are rewritten from what
// the commands produce, and the diff is reviewed like code. The scripts' comments cite the
// rules of docs/contract.md they check.
//
// It is test support, imported by tests only (it imports testing). It imports the runtime
// and runtime/protocol; like every package under runtime it never imports the journal, an
// adapter, commands or cmd, so a script checks the decision core alone.
package scenario

// Package memories is the memory service (protocol §6): what the memory tools
// (memory_remember, memory_search, memory_update, memory_forget) and the memory methods of
// thatch's API do with the memory store, and the texts the model reads: the tools'
// answers, the memories section and hygiene line of the session-start text and of a
// compaction (Injecting), and the related memories and hygiene signals of an extraction
// payload (FormatSignals). The runtime says who calls; the service never enters the loop.
//
// It imports the runtime, runtime/protocol, runtime/redact, the memory store
// (journal/memory) and journal/migrate. Like every adapter it never imports cmd or another
// adapter: natsbus's responders reach it through their Memories interface, wired in cmd.
package memories

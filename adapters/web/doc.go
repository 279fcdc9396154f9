// Package web is thatch's operator endpoint (protocol §8): /healthz, /readyz and
// /metrics for machines, and a web page for people that shows what thatch knows and lets
// them fix its memories. It reads the loop's published snapshots and the stores' read
// connections; it never holds the loop's goroutine longer than one copy of the directory
// (runtime.Loop.Table), at most once a second however many pages are open.
//
// It imports the runtime, runtime/protocol and the stores (journal, journal/memory),
// never the NATS adapters nor any other adapter, and never cmd: the daemon's wiring under
// cmd hands it what it reads.
package web

// Package protocol holds what every side of thatch's wire protocol (docs/contract.md,
// docs/protocol.md) must spell the same way: the reply envelope ({"result": …} or
// {"error": {name, message}}), the error names, the event types, the host API methods,
// thatch's tools and API methods, and the idempotency memo a host answers repeated calls
// from.
//
// It is a leaf: it imports only the standard library, never a package of thatch, so that
// a host (the opencode bridge, the fake host) and thatch's own side can both use it
// without importing the runtime.
package protocol

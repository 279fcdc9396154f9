package web

import (
	"encoding/json"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

// bridgeLink is the in-process opencode bridge's row of status (adapters/opencode's
// BridgeStatus), with the fields the page and the metrics show.
type bridgeLink struct {
	URL       string    `json:"url"`
	HostID    string    `json:"hostID"`
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
	Error     string    `json:"error"`
}

// bridgeOf reads status's bridge row: nil without a bridge (or one this page cannot read).
func bridgeOf(st runtime.StatusView) *bridgeLink {
	if len(st.Bridge) == 0 {
		return nil
	}
	var b bridgeLink
	if json.Unmarshal(st.Bridge, &b) != nil {
		return nil
	}
	return &b
}

// overviewStatus is status as the overview shows it: its bridge row read.
type overviewStatus struct {
	runtime.StatusView
	Bridge *bridgeLink
}

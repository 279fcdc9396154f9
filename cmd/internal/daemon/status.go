package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/runtime"
)

// StatusFile is the status thatch serve keeps in its data folder, so that thatch status
// can report it while the broker is unreachable.
const StatusFile = "status.json"

// SavedStatus is what the file holds: the status and when it was taken.
type SavedStatus struct {
	At     time.Time          `json:"at"`
	Status runtime.StatusView `json:"status"`
	// BrokerURL is the embedded broker's address, so the CLI finds a daemon started
	// with another THATCH_NATS_LISTEN; never an external URL, which can hold credentials.
	BrokerURL string `json:"brokerURL,omitempty"`
	// Stopped is when thatch stopped, set as its last act on a clean stop: the status
	// above is then the last there will be, not a daemon gone quiet.
	Stopped *time.Time `json:"stopped,omitempty"`
	// BrokerCert is the certificate file the embedded broker serves TLS with, so the CLI
	// trusts it without THATCH_NATS_TLS_CERT of its own. The broker's token is never here.
	BrokerCert string `json:"brokerCert,omitempty"`
	// PageURL is the operator endpoint's address (without the token), so thatch ui finds a
	// daemon started with another THATCH_HTTP_LISTEN.
	PageURL string `json:"pageURL,omitempty"`
}

// ReadStatusFile reads the status file of the daemon on dataDir.
func ReadStatusFile(dataDir string) (SavedStatus, error) {
	var f SavedStatus
	data, err := os.ReadFile(filepath.Join(dataDir, StatusFile))
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		return SavedStatus{}, err
	}
	return f, nil
}

// BrokerTLS is the TLS configuration of a process that reaches a running daemon (the CLI,
// thatch bridge): ClientTLS, else, for the embedded broker, trust in the certificate that
// the daemon of the data folder wrote in its status file; nil when the broker serves no
// TLS.
func BrokerTLS(c Config) (*tls.Config, error) {
	cfg, err := c.ClientTLS()
	if cfg != nil || err != nil || c.NATSURL != "" {
		return cfg, err
	}
	if f, _ := ReadStatusFile(c.DataDir); f.BrokerCert != "" {
		return natsbus.ClientTLS(natsbus.TLSFiles{Cert: f.BrokerCert})
	}
	return nil, nil
}

// PageURL is the operator endpoint's base address.
func PageURL(addr string, tls bool) string {
	return web.PageURL(addr, tls)
}

// markStopped records a clean stop in the status file.
func markStopped(dir string, log *slog.Logger) {
	path := filepath.Join(dir, StatusFile)
	var f SavedStatus
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &f) != nil {
		return // no status was ever written
	}
	now := time.Now().UTC()
	f.Stopped = &now
	data, _ = json.Marshal(f)
	err = os.WriteFile(path+".tmp", data, 0o600)
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		log.Debug("cannot mark the status file stopped", "err", err)
	}
}

// writeStatusFile rewrites the status file every second until ctx ends, with broker's
// address and certificate.
func writeStatusFile(ctx context.Context, srv *natsbus.Server, dir string, broker SavedStatus, log *slog.Logger) error {
	path := filepath.Join(dir, StatusFile)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		st, err := srv.Status(ctx)
		if err != nil {
			continue // the loop is stopping
		}
		data, _ := json.Marshal(SavedStatus{At: time.Now().UTC(), Status: st, BrokerURL: broker.BrokerURL, BrokerCert: broker.BrokerCert, PageURL: broker.PageURL})
		tmp := path + ".tmp"
		err = os.WriteFile(tmp, data, 0o600)
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil && !failed {
			log.Warn("cannot write the status file", "path", path, "err", err)
		}
		failed = err != nil
	}
}

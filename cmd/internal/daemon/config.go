package daemon

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/lmittmann/tint"

	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/runtime"
)

// Config is every setting of thatch, read from THATCH_* environment variables. It is the
// only place that reads the environment.
type Config struct {
	DataDir              string `envconfig:"DATA_DIR" desc:"journal and embedded broker store (default $XDG_STATE_HOME/thatch, else ~/.local/state/thatch)"`
	NATSURL              string `envconfig:"NATS_URL" desc:"external NATS server or cluster, comma-separated URLs; unset starts an embedded broker"`
	NATSCreds            string `envconfig:"NATS_CREDS" desc:"credentials file for THATCH_NATS_URL"`
	NATSToken            string `envconfig:"NATS_TOKEN" desc:"token for THATCH_NATS_URL; without it, the embedded broker's token instead of $THATCH_DATA_DIR/broker.token"`
	NATSListen           string `envconfig:"NATS_LISTEN" default:"127.0.0.1:4222" desc:"where the embedded broker listens for hosts"`
	NATSTLSCert          string `envconfig:"NATS_TLS_CERT" desc:"PEM certificate the embedded broker serves TLS with (needed beyond loopback)"`
	NATSTLSKey           string `envconfig:"NATS_TLS_KEY" desc:"PEM private key of THATCH_NATS_TLS_CERT"`
	NATSTLSCA            string `envconfig:"NATS_TLS_CA" desc:"PEM authority thatch's own connections trust instead of THATCH_NATS_TLS_CERT"`
	SubjectPrefix        string `envconfig:"SUBJECT_PREFIX" default:"opencode" desc:"host subject prefix"`
	APIPrefix            string `envconfig:"API_PREFIX" default:"thatch" desc:"thatch's own subject prefix"`
	Stream               string `envconfig:"STREAM" default:"OPENCODE_EVENTS" desc:"JetStream stream of host events"`
	Consumer             string `envconfig:"CONSUMER" default:"thatch" desc:"durable consumer name"`
	StreamMaxBytes       int64  `envconfig:"STREAM_MAX_BYTES" default:"1073741824" desc:"bytes the event stream keeps at most; past it the oldest events go"`
	StreamMaxMsgBytes    int64  `envconfig:"STREAM_MAX_MSG_BYTES" default:"1114112" desc:"bytes of one message (headers included) the event stream stores at most; the broker refuses a larger publish"`
	StreamPurgeMS        int    `envconfig:"STREAM_PURGE_MS" default:"5000" desc:"with the embedded broker, how often events thatch applied are purged from the stream (0 keeps them to the stream's limits)"`
	HostTimeoutMS        int    `envconfig:"HOST_TIMEOUT_MS" default:"10000" desc:"host call timeout, how long a tool call waits for the consumer, and as long again for its commit"`
	StaleAcceptedMS      int    `envconfig:"STALE_ACCEPTED_MS" default:"900000" desc:"age after which an accepted entry goes back to pending"`
	InteractionOutputMax int    `envconfig:"INTERACTION_OUTPUT_MAX" default:"2000" desc:"characters kept of a tool output and of each top-level string arg"`
	BatchMax             int    `envconfig:"BATCH_MAX" default:"512" desc:"events applied per journal transaction at most"`
	StrandSweep          Switch `envconfig:"STRAND_SWEEP" default:"on" desc:"heal stranded sessions (directory gone) on the hosts"`
	StrandSweepMS        int    `envconfig:"STRAND_SWEEP_MS" default:"600000" desc:"interval of the strand and journal sweeps"`
	RuntimeStateTTLMS    int64  `envconfig:"RUNTIME_STATE_TTL_MS" default:"604800000" desc:"the journal sweep drops sessions untouched this long"`
	MemoryInjectChars    int    `envconfig:"MEMORY_INJECT_CHARS" default:"2000" desc:"characters of memories a new session's first request and a compaction carry"`
	MemoryStaleDays      int    `envconfig:"MEMORY_STALE_DAYS" default:"90" desc:"a memory neither used nor updated this long is stale: it leaves injection, stays searchable"`
	ExtractModel         string `envconfig:"EXTRACT_MODEL" desc:"provider/model the extraction runs on (default: the host's small model, else the session's model)"`
	ExtractPayloadChars  int    `envconfig:"EXTRACT_PAYLOAD_CHARS" default:"24000" desc:"characters of tool calls one extraction reads at most; the rest waits for the next"`
	ExtractDailyTokens   int64  `envconfig:"EXTRACT_DAILY_TOKENS" desc:"extraction tokens per UTC day; past it no extraction starts until the next day (unset: no limit)"`
	ClaudeBin            string `envconfig:"CLAUDE_BIN" default:"claude" desc:"the Claude Code binary extraction children of Claude Code sessions run (thatch install --host claude-code)"`
	InstallCommands      Switch `envconfig:"INSTALL_COMMANDS" default:"on" desc:"install the slash commands when thatch serve starts"`
	LogLevel             string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	LogFormat            string `envconfig:"LOG_FORMAT" default:"auto" desc:"auto (text on a terminal, JSON otherwise), text or json"`
	OpencodeURL          string `envconfig:"OPENCODE_URL" desc:"a running opencode serve to bridge (thatch serve and thatch bridge)"`
	ShimListen           string `envconfig:"SHIM_LISTEN" default:"127.0.0.1:4223" desc:"where the bridge serves the opencode plugin shim (loopback)"`
	HTTPListen           string `envconfig:"HTTP_LISTEN" default:"127.0.0.1:4224" desc:"the operator's endpoint: /healthz, /readyz, /metrics and the web page (thatch ui); off disables it"`
	HTTPTLSCert          string `envconfig:"HTTP_TLS_CERT" desc:"PEM certificate the operator's endpoint serves HTTPS with (needed beyond loopback)"`
	HTTPTLSKey           string `envconfig:"HTTP_TLS_KEY" desc:"PEM private key of THATCH_HTTP_TLS_CERT"`
	// OpencodePassword is THATCH_OPENCODE_SERVER_PASSWORD, else opencode's own
	// OPENCODE_SERVER_PASSWORD (envconfig reads the unprefixed name when the prefixed one is unset).
	OpencodePassword string `envconfig:"OPENCODE_SERVER_PASSWORD" desc:"the opencode server's password (HTTP basic auth)"`

	// Team memory (protocol §9, docs/team.md).
	TeamURL    string `envconfig:"TEAM_URL" desc:"the team's NATS server or cluster, comma-separated URLs; unset: nothing leaves the machine"`
	TeamCreds  string `envconfig:"TEAM_CREDS" desc:"NATS credentials file for THATCH_TEAM_URL"`
	TeamToken  string `envconfig:"TEAM_TOKEN" desc:"token for THATCH_TEAM_URL"`
	TeamTLSCA  string `envconfig:"TEAM_TLS_CA" desc:"PEM authority that signed the team server's TLS certificate"`
	TeamAuthor string `envconfig:"TEAM_AUTHOR" desc:"the name on this thatch's memory versions (default <user>@<hostname>)"`

	// OpencodeDir is opencode's config folder, $XDG_CONFIG_HOME/opencode (else
	// ~/.config/opencode): the commands are installed under it.
	OpencodeDir string `ignored:"true"`
}

// Switch is an on/off setting.
type Switch bool

// Decode accepts on/off and their usual spellings.
func (s *Switch) Decode(v string) error {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "true", "1", "yes":
		*s = true
	case "off", "false", "0", "no":
		*s = false
	default:
		return fmt.Errorf("%q is not on or off", v)
	}
	return nil
}

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// LoadConfig reads and validates the environment. An error names the variable and what
// it accepts.
func LoadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("thatch", &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			if pe.TypeName == "daemon.Switch" {
				return c, fmt.Errorf("%s=%q: must be on or off", pe.KeyName, pe.Value)
			}
			switch pe.TypeName {
			case "int", "int32", "int64":
				if errors.Is(pe.Err, strconv.ErrRange) {
					return c, fmt.Errorf("%s=%q: out of range", pe.KeyName, pe.Value)
				}
				return c, fmt.Errorf("%s=%q: must be a whole number, written in digits (e.g. 1000000)", pe.KeyName, pe.Value)
			}
			return c, fmt.Errorf("%s=%q: %v (expected %s)", pe.KeyName, pe.Value, unwrap(pe.Err), pe.TypeName)
		}
		return c, err
	}
	positive := map[string]int{
		"THATCH_HOST_TIMEOUT_MS": c.HostTimeoutMS, "THATCH_STALE_ACCEPTED_MS": c.StaleAcceptedMS,
		"THATCH_INTERACTION_OUTPUT_MAX": c.InteractionOutputMax, "THATCH_BATCH_MAX": c.BatchMax,
		"THATCH_STRAND_SWEEP_MS": c.StrandSweepMS, "THATCH_MEMORY_INJECT_CHARS": c.MemoryInjectChars, "THATCH_MEMORY_STALE_DAYS": c.MemoryStaleDays,
		"THATCH_EXTRACT_PAYLOAD_CHARS": c.ExtractPayloadChars,
	}
	for name, v := range positive {
		if v <= 0 {
			return c, fmt.Errorf("%s=%d: must be a positive integer", name, v)
		}
	}
	for name, v := range map[string]string{"THATCH_SUBJECT_PREFIX": c.SubjectPrefix, "THATCH_API_PREFIX": c.APIPrefix,
		"THATCH_STREAM": c.Stream, "THATCH_CONSUMER": c.Consumer} {
		if !tokenPattern.MatchString(v) {
			return c, fmt.Errorf("%s=%q: must be one subject token of letters, digits, _ or -", name, v)
		}
	}
	if c.ExtractPayloadChars < 1000 {
		return c, fmt.Errorf("THATCH_EXTRACT_PAYLOAD_CHARS=%d: must be at least 1000 (the default is 24000)", c.ExtractPayloadChars)
	}
	// Unset is no limit; a set value is a limit, so 0 (which would read as "nothing may
	// run" or "no limit" depending on who reads it) is refused like a negative one.
	if _, set := os.LookupEnv("THATCH_EXTRACT_DAILY_TOKENS"); set && c.ExtractDailyTokens <= 0 {
		return c, fmt.Errorf("THATCH_EXTRACT_DAILY_TOKENS=%d: must be a positive number of tokens a day; unset it for no limit", c.ExtractDailyTokens)
	}
	if c.ExtractModel != "" {
		if _, _, ok := runtime.ParseModel(c.ExtractModel); !ok {
			return c, fmt.Errorf("THATCH_EXTRACT_MODEL=%q: must be provider/model, as opencode names models (e.g. anthropic/claude-haiku-4-5)", c.ExtractModel)
		}
	}
	// The bridge publishes bodies of up to 1 MiB − 8 KiB: a smaller per-message limit would
	// refuse its events forever. A byte limit under 64 MiB keeps too little history to
	// ride out a stop of thatch while hosts publish.
	if c.StreamMaxMsgBytes < 1<<20 || c.StreamMaxMsgBytes > 64<<20 {
		return c, fmt.Errorf("THATCH_STREAM_MAX_MSG_BYTES=%d: must be from 1048576 (1 MiB, the largest event body) to 67108864 (64 MiB); the default is 1114112", c.StreamMaxMsgBytes)
	}
	if c.StreamMaxBytes < 64<<20 {
		return c, fmt.Errorf("THATCH_STREAM_MAX_BYTES=%d: must be at least 67108864 (64 MiB); the default is 1073741824 (1 GiB)", c.StreamMaxBytes)
	}
	if c.StreamPurgeMS < 0 {
		return c, fmt.Errorf("THATCH_STREAM_PURGE_MS=%d: must be 0 (keep applied events) or a positive number of milliseconds; the default is 5000", c.StreamPurgeMS)
	}
	if c.RuntimeStateTTLMS <= 0 {
		return c, fmt.Errorf("THATCH_RUNTIME_STATE_TTL_MS=%d: must be a positive integer", c.RuntimeStateTTLMS)
	}
	if c.OpencodeURL != "" {
		if u, err := url.Parse(c.OpencodeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("THATCH_OPENCODE_URL=%q: must be the server's http://host:port", c.OpencodeURL)
		}
	}
	listens := map[string]string{"THATCH_NATS_LISTEN": c.NATSListen, "THATCH_SHIM_LISTEN": c.ShimListen}
	if c.HTTPOn() {
		listens["THATCH_HTTP_LISTEN"] = c.HTTPListen
	}
	for name, addr := range listens {
		if err := checkListen(name, addr); err != nil {
			return c, err
		}
	}
	if err := c.checkAccess(); err != nil {
		return c, err
	}
	if err := c.checkTeam(); err != nil {
		return c, err
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return c, err
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		return c, fmt.Errorf("THATCH_LOG_FORMAT=%q: must be auto, text or json", c.LogFormat)
	}
	if c.DataDir == "" {
		base := os.Getenv("XDG_STATE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return c, fmt.Errorf("THATCH_DATA_DIR is unset and there is no home folder: set THATCH_DATA_DIR")
			}
			base = filepath.Join(home, ".local", "state")
		}
		c.DataDir = filepath.Join(base, "thatch")
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		if home, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(home, ".config")
		}
	}
	if base != "" {
		c.OpencodeDir = filepath.Join(base, "opencode")
	}
	return c, nil
}

// checkListen rejects a listen address that cannot be bound however the machine is set
// up, so thatch fails at once naming the variable rather than when the part starts.
func checkListen(name, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		var n int
		if n, err = strconv.Atoi(port); err != nil {
			err = fmt.Errorf("port %q is not a number", port)
		} else if n < 0 || n > 65535 {
			err = fmt.Errorf("port %d is out of range", n)
		}
	}
	if err == nil && host != "" && host != "localhost" && net.ParseIP(host) == nil {
		err = fmt.Errorf("%q is not an IP address", host)
	}
	if err != nil {
		return fmt.Errorf("%s=%q: must be host:port with an IP address, e.g. 127.0.0.1:4222 (%v)", name, addr, unwrap(err))
	}
	return nil
}

func unwrap(err error) error {
	for errors.Unwrap(err) != nil {
		err = errors.Unwrap(err)
	}
	return err
}

// Rules are the runtime tunables this configuration sets.
func (c Config) Rules() runtime.Rules {
	return runtime.Rules{
		StaleAccepted: time.Duration(c.StaleAcceptedMS) * time.Millisecond,
		OutputMax:     c.InteractionOutputMax,
		TTL:           time.Duration(c.RuntimeStateTTLMS) * time.Millisecond,
		PayloadChars:  c.ExtractPayloadChars,
		ExtractModel:  c.ExtractModel,
		DailyTokens:   c.ExtractDailyTokens,
		RetryAfter:    runtime.DefaultRules.RetryAfter,
	}
}

// HTTPOn says whether the operator's endpoint runs (THATCH_HTTP_LISTEN is not off).
func (c Config) HTTPOn() bool {
	switch strings.ToLower(strings.TrimSpace(c.HTTPListen)) {
	case "off", "":
		return false
	}
	return true
}

// HostTimeout is THATCH_HOST_TIMEOUT_MS.
func (c Config) HostTimeout() time.Duration { return time.Duration(c.HostTimeoutMS) * time.Millisecond }

// BrokerURL is where clients reach thatch's broker: THATCH_NATS_URL, else the embedded
// broker at THATCH_NATS_LISTEN.
func (c Config) BrokerURL() string {
	if c.NATSURL != "" {
		return c.NATSURL
	}
	return "nats://" + c.NATSListen
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("THATCH_LOG_LEVEL=%q: must be debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger builds the one logger: tint on a terminal, JSON otherwise. Text written
// elsewhere (THATCH_LOG_FORMAT=text into a file or a pipe) has no colour codes. Every line
// goes through redactingHandler: no credentials of a URL reach the log.
func NewLogger(w *os.File, level, format string) *slog.Logger {
	l, _ := parseLevel(level)
	tty := IsTerminal(w)
	if format == "auto" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(redactingHandler{tint.NewTextHandler(w, &tint.Options{Level: l, TimeFormat: time.TimeOnly, NoColor: !tty})})
	}
	return slog.New(redactingHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// checkTeam checks the team settings and gives THATCH_TEAM_AUTHOR its default,
// <user>@<hostname>.
func (c *Config) checkTeam() error {
	c.TeamAuthor = strings.TrimSpace(c.TeamAuthor)
	if c.TeamAuthor == "" {
		user := cmp.Or(os.Getenv("USER"), os.Getenv("LOGNAME"), "thatch")
		host, _ := os.Hostname()
		c.TeamAuthor = user + "@" + cmp.Or(host, "localhost")
	}
	if len(c.TeamAuthor) > 200 {
		return fmt.Errorf("THATCH_TEAM_AUTHOR is %d bytes: give a name of at most 200", len(c.TeamAuthor))
	}
	if c.TeamURL == "" {
		return nil
	}
	for _, u := range strings.Split(c.TeamURL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, pu.Scheme) {
			return fmt.Errorf("THATCH_TEAM_URL: %q is not a NATS URL; give nats://host:4222 (or tls://), comma-separated for a cluster", team.RedactURL(u))
		}
	}
	for name, f := range map[string]string{"THATCH_TEAM_CREDS": c.TeamCreds, "THATCH_TEAM_TLS_CA": c.TeamTLSCA} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s=%s: %v", name, f, unwrap(err))
		}
	}
	return nil
}

// TeamTLS is the TLS configuration of the team's connection: THATCH_TEAM_TLS_CA's
// authority, else the system's (for a tls:// URL), else none.
func (c Config) TeamTLS() (*tls.Config, error) {
	if c.TeamTLSCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.TeamTLSCA)
	if err != nil {
		return nil, fmt.Errorf("THATCH_TEAM_TLS_CA=%s: %w", c.TeamTLSCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("THATCH_TEAM_TLS_CA=%s: no PEM certificate in it", c.TeamTLSCA)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

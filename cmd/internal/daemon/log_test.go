package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// TestRedactingHandler: the message, string attributes, errors, Stringers, attributes
// added with With, and attributes in groups lose their URLs' credentials; other values
// stay as they are.
func TestRedactingHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(redactingHandler{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})})
	u, err := url.Parse("http://u1:s1@h:1/x")
	if err != nil {
		t.Fatal(err)
	}
	log.With("base", "nats://s2@h:2", slog.Group("g0", "v", "nats://u:s3@h:3")).WithGroup("grp").
		Info("dialing http://u:s4@h:4 now", "url", "tls://s5@h:5", "err", fmt.Errorf("get %q: refused", "http://u:s6@h:6"),
			"stringer", u, "n", 7, slog.Group("inner", "deep", "http://u:s7@h:7", slog.Group("deeper", "x", "nats://s8@h:8")))
	out := buf.String()
	for i := 1; i <= 8; i++ {
		if strings.Contains(out, fmt.Sprintf("s%d", i)) {
			t.Errorf("secret s%d left in %s", i, out)
		}
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	grp, _ := line["grp"].(map[string]any)
	inner, _ := grp["inner"].(map[string]any)
	if line["msg"] != "dialing http://REDACTED@h:4 now" || line["base"] != "nats://REDACTED@h:2" || grp["url"] != "tls://REDACTED@h:5" ||
		grp["n"] != float64(7) || inner["deep"] != "http://REDACTED@h:7" || grp["stringer"] != "http://REDACTED@h:1/x" {
		t.Fatalf("redacted line: %s", out)
	}
	buf.Reset()
	log.Info("plain", "url", "http://127.0.0.1:4096", "email", "me@example.com")
	if !strings.Contains(buf.String(), `"url":"http://127.0.0.1:4096"`) || !strings.Contains(buf.String(), "me@example.com") {
		t.Fatalf("a line without credentials changed: %s", buf.String())
	}
}

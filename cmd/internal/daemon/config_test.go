package daemon

import (
	"fmt"
	"strings"
	"testing"
)

// TestExtractionConfig: the extraction settings are read, and a wrong value stops
// daemon.LoadConfig with a message naming the variable.
func TestExtractionConfig(t *testing.T) {
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.ExtractModel != "" || c.ExtractPayloadChars != 24000 || c.ExtractDailyTokens != 0 {
		t.Errorf("defaults: model %q, payload %d, daily %d; want \"\", 24000, 0", c.ExtractModel, c.ExtractPayloadChars, c.ExtractDailyTokens)
	}
	t.Run("set", func(t *testing.T) {
		t.Setenv("THATCH_EXTRACT_MODEL", "anthropic/claude-haiku-4-5")
		t.Setenv("THATCH_EXTRACT_PAYLOAD_CHARS", "1000")
		t.Setenv("THATCH_EXTRACT_DAILY_TOKENS", "250000")
		c, err := LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		rules := c.Rules()
		if rules.ExtractModel != "anthropic/claude-haiku-4-5" || rules.PayloadChars != 1000 || rules.DailyTokens != 250000 {
			t.Errorf("rules %+v", rules)
		}
	})
	for _, tc := range []struct{ name, value string }{
		{"THATCH_EXTRACT_MODEL", "haiku"},
		{"THATCH_EXTRACT_MODEL", "anthropic/"},
		{"THATCH_EXTRACT_MODEL", "anthropic/claude haiku"},
		{"THATCH_EXTRACT_PAYLOAD_CHARS", "10"},
		{"THATCH_EXTRACT_PAYLOAD_CHARS", "999"},
		{"THATCH_EXTRACT_PAYLOAD_CHARS", "0"},
		{"THATCH_EXTRACT_DAILY_TOKENS", "-5"},
		{"THATCH_EXTRACT_DAILY_TOKENS", "0"}, // set is a limit: unset is no limit
		{"THATCH_EXTRACT_DAILY_TOKENS", "lots"},
		{"THATCH_EXTRACT_DAILY_TOKENS", "1e6"},
		{"THATCH_BATCH_MAX", "99999999999999999999"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			_, err := LoadConfig()
			if err == nil || !strings.Contains(err.Error(), tc.name+"=") || !strings.Contains(err.Error(), tc.value) {
				t.Errorf("LoadConfig with %s=%q: %v, want an error naming the variable and its value", tc.name, tc.value, err)
			}
			if tc.value == "1e6" && !strings.Contains(fmt.Sprint(err), "whole number") ||
				tc.name == "THATCH_BATCH_MAX" && !strings.Contains(fmt.Sprint(err), "out of range") {
				t.Errorf("LoadConfig with %s=%q: %v, want it to say what a number must look like", tc.name, tc.value, err)
			}
			if tc.name == "THATCH_EXTRACT_DAILY_TOKENS" && (tc.value == "-5" || tc.value == "0") && !strings.Contains(fmt.Sprint(err), "unset it for no limit") {
				t.Errorf("LoadConfig with %s=%q: %v, want it to say \"unset it for no limit\"", tc.name, tc.value, err)
			}
		})
	}
}

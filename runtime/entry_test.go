package runtime

import "testing"

func TestTrivialEntry(t *testing.T) {
	for out, want := range map[string]bool{
		"":                                  true,
		" \n\t":                             true,
		"(no output)":                       true,
		"  (No Output)\n":                   true,
		"(NO OUTPUT)":                       true,
		LeftOut(".env"):                     true,
		"ok":                                false,
		"(no output) make: nothing to do":   false,
		"no output":                         false,
		"error: (no output) from the child": false,
	} {
		if got := TrivialEntry(&Body{Tool: "bash", Output: out}); got != want {
			t.Errorf("TrivialEntry(output %q) = %v, want %v", out, got, want)
		}
	}
}

func TestEntryID(t *testing.T) {
	for _, c := range []struct{ root, session, call, want string }{
		{"ses_a", "ses_a", "call_1", "call_1"},
		{"ses_a", "ses_t", "call_1", "ses_t/call_1"},
		{"ses_a", "ses_tt", "toolu_01", "ses_tt/toolu_01"},
	} {
		if got := EntryID(c.root, c.session, c.call); got != c.want {
			t.Errorf("EntryID(%s, %s, %s) = %q, want %q", c.root, c.session, c.call, got, c.want)
		}
	}
}

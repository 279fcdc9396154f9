// Package redact is the one redactor on every path into storage (protocol rule 13,
// "Privacy"): whatever thatch writes to its journal, its memory store or its logs goes
// through Text, or JSON for a JSON document, first.
//
// # What is removed
//
// Text between <private> and </private> is removed with the tags. Tags are matched
// without regard to ASCII case and nest: a block ends at the close tag that balances its
// open tag. An open tag that is never closed removes everything after it (fail closed). A
// close tag without an open tag is kept. Removed blocks leave no marker; each counts
// once as "private".
//
// # What is replaced
//
// Each secret is replaced whole by [REDACTED:<rule>], so that a reader knows what was
// there and nothing of the secret (no prefix, no suffix) remains. Where a rule keeps
// context (a key, a URL's user and host, the word Bearer), only the secret goes:
//
//	aws-access-key     AKIA or ASIA + 16 or more upper-case letters or digits
//	aws-secret         a 40-character base64 value of aws_secret_access_key (any
//	                   assignment form, below)
//	github-token       ghp_, gho_, ghu_, ghs_, ghr_ + 36 or more letters or digits;
//	                   github_pat_ + 22 or more letters, digits or underscores
//	gitlab-token       glpat-, glptt-, gldt-, glrt-, glcbt-, gloas- + 20 or more of
//	                   [A-Za-z0-9_-] (dotted parts included)
//	anthropic-key      sk-ant- + 20 or more of [A-Za-z0-9_-]
//	openai-key         sk- + 17 or more of [A-Za-z0-9_-] (20 characters with sk-, as in
//	                   sk-proj-…), unless the body is lower-case words joined by hyphens
//	                   (sk-learn-compatible-wrapper)
//	slack-token        xoxa-, xoxb-, xoxe-, xoxp-, xoxr-, xoxs-, xapp- + 10 or more of
//	                   [A-Za-z0-9-]
//	slack-webhook      the path after https://hooks.slack.com/services/ (or workflows/,
//	                   triggers/)
//	google-api-key     AIza + 35 or more of [A-Za-z0-9_-]
//	stripe-key         sk_live_, sk_test_, rk_live_, rk_test_ + 16 or more letters or digits
//	npm-token          npm_ + 36 or more letters or digits
//	pypi-token         pypi- + 50 or more of [A-Za-z0-9_-]
//	huggingface-token  hf_ + 30 or more letters or digits
//	age-secret-key     AGE-SECRET-KEY-1 + 50 or more upper-case letters or digits
//	jwt                eyJ… . … . … : three base64url segments, the first two of 10 or
//	                   more characters, the signature of 10 or more (or empty when the
//	                   payload also starts eyJ)
//	pem-private-key    from a -----BEGIN … PRIVATE KEY----- line (also OPENSSH, RSA, EC,
//	                   ENCRYPTED, PGP … PRIVATE KEY BLOCK) through the next -----END …
//	                   PRIVATE KEY----- line; with no END line, to the end of the text
//	                   when a key body follows. Also a base64-encoded PEM private key
//	                   (LS0tLS1CRUdJTi…, as in a kubeconfig's client-key-data).
//	url-password       scheme://user:password@host keeps scheme, user and host:
//	                   postgres://bob:[REDACTED:url-password]@db
//	basic-auth         the password of curl -u/--user user:password
//	bearer             the token after "Bearer " when it has 16 or more token characters
//	                   (any length in an Authorization header); the word Bearer is kept
//	authorization      the credentials of an Authorization or Proxy-Authorization header
//	                   with another scheme (Basic, token, Digest …), or of one whose value
//	                   is a bare token; the scheme is kept
//	assignment         the value of a key that names a secret, below
//
// A distinctive prefix is a token after any character, a letter, digit or '_' included
// ("xghp_…", "log\nghp_…" in JSON kept as text): ghp_, gho_, ghu_, ghs_, ghr_,
// github_pat_, the GitLab prefixes, sk-ant-, sk-proj-, the Slack prefixes, sk_live_,
// sk_test_, rk_live_, rk_test_, AGE-SECRET-KEY-1 and a JWT's eyJ. Inside a word, where an
// identifier is likelier, sk-ant- and sk-proj- bodies need upper- and lower-case
// letters, a Stripe body a digit, and a JWT's first segment must decode to a header with
// "alg", "typ" or "enc" (framework_test_integrationSuite, org.monkeyJar.a.b stay). The
// other tokens (AKIA, ASIA, sk-, AIza, npm_, pypi-, hf_, Bearer, a base64 PEM key) must
// start a word: the character before them is not a letter, digit or underscore, or it
// ends a JSON string escape (\n, \t, \r, \b, \f, \", \\, \/, \uXXXX). An assignment's name
// does not take in the escape before it: in "…\nDB_PASSWORD=x" the name is DB_PASSWORD.
// A URL's password is found with its slashes escaped too (postgres:\/\/bob:pw@db).
//
// # Assignments
//
// A key is a name of letters, digits, '_', '-' and '.' (DB_PASSWORD, x-api-key,
// spring.datasource.password, --password), then an optional closing quote, then one of
// = : := ?= == => (or, for a --flag or a .netrc entry, a space), then the value. The
// key's words are matched without regard to case, also inside longer names:
//
//   - password class: passw (password, passwd), passphrase, pwd, secret (not
//     secretary). The value is always redacted unless it is a placeholder.
//   - token class: token, credential, api_key/apikey/api-key, access_key,
//     private_key, key_data, a name that ends in "key" (ENCRYPTION_KEY, but not "key"
//     alone), and auth as a word (auth, basic_auth, _auth, auth_…). The value is
//     redacted only when it looks random: 16 or more characters with Shannon entropy of
//     3 bits per character or more and a digit or both cases, or 20 or more characters
//     with letters and digits; and not when it is a path or a URL.
//
// Names are not secret names when they contain "public" or "pubkey", when they are PWD
// or OLDPWD (the shell's directories), when they follow a '/' (a path: /etc/passwd), or
// when their last word says they are about a secret rather than one (DB_PASSWORD_FILE,
// secretName, password_min_length, token_type, …: name, file, path, ref, type, length,
// min, max, policy, hint, url, endpoint, stdin, …).
//
// The value is a quoted string (its contents; "…", '…', `…`, or \"…\" inside a quoted
// document), or else a bare word up to white space, a quote or one of ; & , ) ] }. When
// a space separates "key:" or "key =" from a bare value, as in YAML, headers and prose,
// the value is the rest of the line less a trailing " # comment", ',' or ';', and it is
// left alone when it has several words: "secret: see vault" and "api_key: see the docs"
// survive; so does "password: hunter2 at noon" (a documented miss). A YAML block scalar
// (key: | or key: >) has its indented lines redacted.
//
// Placeholders are never redacted: an empty value; a marker; a mask (***, xxxx, ••••,
// ...); a reference ($VAR, ${VAR}, $(cmd), ${{ secrets.X }}, {{ .Values.x }}, {name},
// %s, %VAR%); a <…> stand-in; nil, null, none, true, false, undefined and type names
// (string, str, int, bool, bytes, []byte, any, object, optional). So is a bare value
// that is code: a call or an index (os.Getenv("X"), getpass(), os.environ["X"]) or a
// field whose name names a secret (cfg.Password, process.env.API_TOKEN). Words such as
// changeme, password or example are not placeholders: they may be the real value, and
// they are redacted.
//
// # What is left alone
//
// Anything that no rule above matches, in particular: high-entropy strings outside an
// assignment (git SHAs, UUIDs, sha256: digests, base64 data such as images, public keys
// and certificates); the words token, password and secret in prose and code when no
// assignment follows ("the password field is required", "token: expired",
// token := lexer.Next(), Password string `json:"password"`); URLs without a password
// (https://user@host); sk- followed by a short word (sk-learn); object keys in JSON. A
// secret with none of the shapes above (a password passed positionally, sshpass -p x,
// mysql -px) is not recognised.
//
// # Guarantees
//
// Text is idempotent: Text(Text(s)) == Text(s), and the second call counts nothing,
// because no rule matches a [REDACTED:…] marker, and a value that holds one is never
// judged again. Valid UTF-8 stays valid: every
// cut is at an ASCII byte. JSON keeps a valid document valid (see JSON for invalid
// input). Both are linear in the input (docs/performance.md has their cost).
//
// The package is pure: no I/O, no logging, no clock, no state that changes; it is safe
// for concurrent use. It imports only the standard library and nothing of thatch, so that
// every layer can use it and it can be tested alone. Keep it that way.
package redact

#!/usr/bin/env bash
# Installs the Claude Code CLI that `make e2e` runs, outside the repository: the npm package
# @anthropic-ai/claude-code and its platform package (which holds the native binary) from
# the npm registry into the cache folder, reused while the version matches. The package's
# postinstall only links the platform binary, which we run directly, so scripts are off and
# nothing is downloaded but the two npm packages. Prints the claude binary's path.
# Usage: setup-claude.sh CACHE_DIR VERSION
set -euo pipefail
cache=$1 version=$2

if ! command -v npm >/dev/null; then
	echo "e2e: npm is missing: install Node.js 20 or later (it comes with npm)" >&2
	exit 1
fi
platform=$(node -p 'process.platform + "-" + process.arch')
bin="$cache/node_modules/@anthropic-ai/claude-code-$platform/claude"
have=$("$bin" --version 2>/dev/null | cut -d' ' -f1 || true)
if [ "$have" != "$version" ]; then
	echo "e2e: installing @anthropic-ai/claude-code@$version into $cache" >&2
	mkdir -p "$cache"
	[ -f "$cache/package.json" ] || echo '{"private": true}' >"$cache/package.json"
	npm install --prefix "$cache" --no-audit --no-fund --loglevel=error --ignore-scripts \
		"@anthropic-ai/claude-code@$version" >&2
	have=$("$bin" --version | cut -d' ' -f1)
	[ "$have" = "$version" ] || { echo "e2e: $bin reports version $have, want $version" >&2; exit 1; }
fi
echo "$bin"

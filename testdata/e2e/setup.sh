#!/usr/bin/env bash
# Installs what `make e2e` needs, outside the repository: opencode and its plugin package
# from the npm registry into the cache folder (reused while the version matches), and
# ripgrep, which opencode runs for file search. Prints the opencode binary's path.
# Usage: setup.sh CACHE_DIR VERSION
set -euo pipefail
cache=$1 version=$2

if ! command -v npm >/dev/null; then
	echo "e2e: npm is missing: install Node.js 20 or later (it comes with npm)" >&2
	exit 1
fi
platform=$(node -p 'process.platform + "-" + process.arch')
bin="$cache/node_modules/opencode-$platform/bin/opencode"
plugin="$cache/node_modules/@opencode-ai/plugin/package.json"
have=$("$bin" --version 2>/dev/null || true)
if [ "$have" != "$version" ] || ! grep -q "\"version\": \"$version\"" "$plugin" 2>/dev/null; then
	echo "e2e: installing opencode-ai@$version and @opencode-ai/plugin@$version into $cache" >&2
	mkdir -p "$cache"
	[ -f "$cache/package.json" ] || echo '{"private": true}' >"$cache/package.json"
	# opencode-ai's postinstall only links the platform binary, which we run directly.
	npm install --prefix "$cache" --no-audit --no-fund --loglevel=error --ignore-scripts \
		"opencode-ai@$version" "@opencode-ai/plugin@$version" >&2
	have=$("$bin" --version)
	[ "$have" = "$version" ] || { echo "e2e: $bin reports version $have, want $version" >&2; exit 1; }
fi

if ! command -v rg >/dev/null; then
	echo "e2e: installing ripgrep" >&2
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo -n"
	if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq ripgrep; } >&2; then
		echo "e2e: ripgrep (rg) is missing and could not be installed: install it (apt-get install ripgrep)" >&2
		exit 1
	fi
fi
echo "$bin"

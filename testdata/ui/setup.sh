#!/usr/bin/env bash
# Installs what `make ui-test` needs: a headless-capable Chromium, from Debian's `chromium`
# package with apt when none is at hand (the machine's only way in besides the Go module
# proxy and npm). Prints the browser's path.
# Usage: setup.sh
set -euo pipefail

find_chromium() {
	if [ -x /usr/bin/chromium ]; then
		echo /usr/bin/chromium
		return 0
	fi
	command -v chromium 2>/dev/null
}

if ! bin=$(find_chromium); then
	echo "ui: installing chromium" >&2
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo -n"
	if ! { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2; then
		echo "ui: chromium is missing and could not be installed: install it (apt-get install chromium)" >&2
		exit 1
	fi
	bin=$(find_chromium) || { echo "ui: chromium was installed but is not on PATH or at /usr/bin/chromium" >&2; exit 1; }
fi
if ! version=$("$bin" --version 2>/dev/null); then
	echo "ui: $bin does not run ($bin --version failed)" >&2
	exit 1
fi
echo "ui: using $version ($bin)" >&2
echo "$bin"

#!/usr/bin/env bash
# Installs tessera's git hooks (hack/pre-commit: clang-format check of the staged files).
# The installed hook is a stub that runs hack/pre-commit of the checkout being committed in, so
# it follows the script as it changes and works in every `git worktree` of the repository
# (they share one hooks folder). Re-running is harmless; an existing, different pre-commit hook
# is kept as pre-commit.local and still run first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hooks=$(git rev-parse --git-path hooks)
case "$hooks" in /*) ;; *) hooks="$PWD/$hooks" ;; esac
mkdir -p "$hooks"
hook="$hooks/pre-commit"
marker='# tessera: hack/install-hooks.sh'

if [[ -e $hook ]] && ! grep -qF "$marker" "$hook"; then
  mv "$hook" "$hooks/pre-commit.local"
  echo "install-hooks: kept the existing hook as $hooks/pre-commit.local"
fi
cat >"$hook" <<STUB
#!/bin/sh
$marker
local_hook="\$(git rev-parse --git-path hooks)/pre-commit.local"
if [ -x "\$local_hook" ]; then "\$local_hook" "\$@" || exit \$?; fi
top=\$(git rev-parse --show-toplevel)
if [ -x "\$top/hack/pre-commit" ]; then exec "\$top/hack/pre-commit" "\$@"; fi
STUB
chmod +x "$hook"
echo "install-hooks: installed $hook (runs hack/pre-commit)"
